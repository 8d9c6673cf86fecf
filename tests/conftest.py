import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # shared test helpers (tests/_serving.py)
