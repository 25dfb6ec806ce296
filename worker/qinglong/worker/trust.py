"""Which plans this Worker may run: the operator keys it trusts and whether every plan must be signed by one
(worker.toml `trusted_plan_keys`, `require_signed_plans`; qinglong.wire.signing). Touches nothing but the key
files it is given, once, when the Worker starts.

A plan is checked when its offer arrives, before the starting ACK: no secret is delivered, no deadline pinned
and nothing fetched for a plan this Worker refuses. A refusal is a start failure with the signing module's code
(`plan.unsigned`, `plan.signer_unknown`, `plan.signature_invalid`), in the Run's timeline and the Attempt's
error. Without `require_signed_plans`, an unsigned plan runs; a signed one is still checked when this Worker
trusts any key (a signature that does not verify means the plan was changed after it was signed).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from qinglong.wire.offer import Offer

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


@dataclass(frozen=True)
class PlanTrust:
    keys: Mapping[str, Ed25519PublicKey] = field(default_factory=dict)
    required: bool = False

    @classmethod
    def load(cls, paths: Sequence[Path], required: bool) -> PlanTrust:
        """The keys of `paths` (ValueError: one line naming a bad file); none needed unless `required`."""
        if not paths:
            if required:
                raise ValueError("require_signed_plans needs trusted_plan_keys: no plan could ever run")
            return cls({}, required)
        from qinglong.wire.signing import load_trusted  # cryptography: only on a Worker that checks signatures

        return cls(load_trusted(paths), required)

    def refusal(self, offer: Offer) -> str | None:
        """None when this Worker may run the offer's plan, else the start-failure code."""
        if offer.plan_signature is None:
            return "plan.unsigned" if self.required else None
        if not self.keys:
            return None  # signed, but this Worker checks no signatures
        from qinglong.wire.signing import PlanRefused, verify

        try:
            verify(self.keys, offer.project_id, offer.plan, offer.plan_signature)
        except PlanRefused as refused:
            return refused.code
        return None
