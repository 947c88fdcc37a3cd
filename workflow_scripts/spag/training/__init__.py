"""Training and reference scoring (docs/design.md section 4).

- :mod:`spag.training.settings`: the settings of a run and of scoring, declared once
  (CLI, config, defaults, the rules' flags).
- :mod:`spag.training.arguments`: the Trainer's arguments (``TrainingArguments`` with the loss's).
- :mod:`spag.training.collate`: tokenisation, masking, padding and length grouping.
- :mod:`spag.training.losses`: sequence log-probs and the SFTwithKL and OfflinePO objectives.
- :mod:`spag.training.scoring`: reference log-probs and the reference model's identity.
- :mod:`spag.training.trainer`: the ``Trainer`` subclass and its loss log.
- :mod:`spag.training.run`: one training run, start to end.
- :mod:`spag.training.checkpoints`: which checkpoints a run may resume from.
- :mod:`spag.training.distributed`: DeepSpeed configs, a one-rank world, barriers.
- :mod:`spag.training.output`: the model folder, written atomically with its tokenizer.
"""
