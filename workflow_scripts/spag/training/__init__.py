"""Training and reference scoring (DESIGN section 4).

- :mod:`spag.training.collate`: tokenisation, masking, padding and length grouping.
- :mod:`spag.training.losses`: the SFTwithKL and OfflinePO objectives on tensors.
- :mod:`spag.training.scoring`: reference log-probs and the reference model's identity.
- :mod:`spag.training.trainer`: the ``Trainer`` subclass, loss log and the training run.
"""
