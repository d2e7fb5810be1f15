"""Environment switches that keep every library offline and quiet.

Imported by the modules that load models, Chroma, litellm or Gradio, before those libraries.
"""

import os

OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "GRADIO_ANALYTICS_ENABLED": "False",
    "ANONYMIZED_TELEMETRY": "False",
    "TOKENIZERS_PARALLELISM": "false",
}

for _key, _value in OFFLINE_ENV.items():
    os.environ.setdefault(_key, _value)
