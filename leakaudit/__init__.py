"""leakaudit: does a student trained by on-policy distillation reveal which records its teacher saw?"""

__version__ = "0.1.0"
