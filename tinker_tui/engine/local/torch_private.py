"""Every use the local backend makes of torch's private names, in one module: the
multi-tensor ("foreach") ops `engine.local.adamw` updates the adapters with, the same ones
`torch.optim.AdamW` uses, which torch does not export under public names.

Each is in `PRIVATE_NAMES`; the suite checks the installed torch still has every one
(tests/test_private_names.py) and that no other module reaches into torch's privates.
"""

from __future__ import annotations

import torch

#: (owner, name): the private names used below.
PRIVATE_NAMES = tuple(
    ("torch", f"_foreach_{op}")
    for op in ("mul_", "lerp_", "addcmul_", "sqrt", "div_", "add_", "addcdiv_")
)

mul_ = torch._foreach_mul_
lerp_ = torch._foreach_lerp_
addcmul_ = torch._foreach_addcmul_
sqrt = torch._foreach_sqrt
div_ = torch._foreach_div_
add_ = torch._foreach_add_
addcdiv_ = torch._foreach_addcdiv_
