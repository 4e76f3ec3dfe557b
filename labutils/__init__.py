"""Loop Lab reference implementation: data, model, the training loop, checkpoints, plots and checks."""
