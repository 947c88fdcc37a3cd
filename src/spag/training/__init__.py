"""Training and reference scoring (docs/design.md section 4).

- :mod:`spag.training.settings`: the settings of a run, declared once (CLI, config, defaults).
- :mod:`spag.training.collate`: tokenisation, masking, padding and length grouping.
- :mod:`spag.training.losses`: the SFTwithKL and OfflinePO objectives on tensors.
- :mod:`spag.training.scoring`: reference log-probs and the reference model's identity.
- :mod:`spag.training.trainer`: the ``Trainer`` subclass and its loss log.
- :mod:`spag.training.run`: one training run, start to end.
- :mod:`spag.training.checkpoints`: which checkpoints a run may resume from.
- :mod:`spag.training.distributed`: DeepSpeed configs, a one-rank world, barriers.
- :mod:`spag.training.output`: the model folder, written atomically with its tokenizer.
"""
