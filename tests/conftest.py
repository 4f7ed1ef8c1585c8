"""Suite-wide settings: one torch thread (the CI box has 2 shared cores) and quiet gymnasium."""

import torch

torch.set_num_threads(1)
