"""FedBERT split learning: the client holds the embeddings and the task head, the server the
encoder body; activations and gradients cross a byte link every step (no FedML import)."""
