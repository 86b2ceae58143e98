"""What an annotation run is told (:class:`AnnotatorSettings`: the endpoint's settings plus the
run's) and what it counts (:class:`Accounting`: groups, requests, retries, tokens and estimated
cost)."""

from __future__ import annotations

from dataclasses import dataclass

from pruner_model.core.chat import Accounting, EndpointSettings

__all__ = ["Accounting", "AnnotatorSettings"]


@dataclass
class AnnotatorSettings(EndpointSettings):
    concurrency: int = 4  # requests in flight
    max_invalid: int = 2  # extra attempts when the answer is invalid
    max_prompt_tokens: int = 1500  # listwise above this estimate → one call per passage
    # groups in a row that fail to connect at all (connection refused or reset, not a timeout)
    # before the run stops as "endpoint down" instead of rejecting every remaining group
    max_connection_failures: int = 3
