"""The ``calibration:`` section of a training config: how the checkpoint's operating point is
calibrated after training (:mod:`pruner_model.training.calibration`,
:func:`pruner_model.evaluation.calibrate.calibrate`); docs/training-config.md."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from pruner_model.training.errors import ConfigError


@dataclass
class CalibrationSection:
    target_evidence: float = 0.97  # evidence preserved to keep when picking the threshold
    enabled: bool = True
    # relative floors tried beside absolute scores (see PrunerConfig.relative_floor); the pair
    # (floor, threshold) with the most compression at the target wins. [] = absolute scores only
    relative_floors: list[float] = field(default_factory=list)
    # with floors to choose from, the pair is chosen by its compression under k-fold
    # cross-validation on the calibration groups (in-sample, every candidate meets the target
    # exactly and the best fit to those very groups wins); < 2 = in-sample choice
    folds: int = 5
    # relevance exponents tried beside 0 (see PrunerConfig.relevance_exponent): sentence scores
    # times passage relevance ** e; chosen with the floor, by the same (cross-validated) compression
    relevance_exponents: list[float] = field(default_factory=list)
    # each passage's relevance set against the request's best before weighting (PrunerConfig.
    # relevance_contrast; 0 = off): sigmoid(logit r + c (logit r - max logit r)). A fixed rule,
    # not a candidate: the floor and exponent are chosen under it
    relevance_contrast: float = 0.0
    # how the floor and exponent are chosen: "threshold", the pair whose one threshold (meeting the
    # target on every slice) compresses the calibration groups most (cross-validated); "curve", the
    # pair under which each slice compresses most at its own threshold for the target (the mean
    # over slices), so sentences are ordered best within each kind of text; the threshold is then
    # the one that meets the target on every slice, as with "threshold"
    choose_by: str = "threshold"
    # the threshold is calibrated for target_evidence + margin: a calibrated threshold lands on
    # new queries around its target, half the time under it; a margin buys headroom for compression
    margin: float = 0.0
    # calibrate each slice's threshold so that new queries keep >= target (+ margin) with this
    # confidence, judged by an exact binomial bound on how many calibration queries with evidence
    # the slice has: small slices (a few hundred low-overlap questions) get more headroom than large
    # ones. null = the threshold that meets the target on the calibration queries themselves
    confidence: float | None = None
    # each shifted or source slice need only keep target_evidence - slice_tolerance (all of them
    # pooled still keep the target): 0 = every slice keeps the target, so the slice whose answers
    # are hardest to find sets the threshold for all the others
    slice_tolerance: float = 0.0
    # shifted versions of the calibration groups (pruner_model.evaluation.shifts: mined, low_overlap, noisy,
    # or shifts joined by "+", e.g. mined+noisy) scored beside them: floor and exponent are chosen
    # on all of them pooled, and the threshold is the lowest that meets the target on each, so the
    # promise holds off the calibration domain too
    shifts: list[str] = field(default_factory=list)
    # build the mined and noisy copies from only N of the calibration groups (None = all of them):
    # each scores its groups again, so this bounds the calibration time of large slices
    # (low_overlap is a subset of the calibration groups and reuses their scores; combined slices
    # of low-overlap questions, e.g. low_overlap+noisy, take that subset of all of them)
    shift_groups: int | None = None
    # queries whose best sentence scores under the uncertainty threshold are flagged uncertain: it
    # is set so that this share of the calibration queries with evidence falls under it (0 = off)
    uncertain_share: float = 0.1
    summary_target: float | None = 0.99  # the middle tier's lower edge keeps this share of evidence
    # label every annotator's answer sentences in the calibration groups (records with
    # meta.answers, as `pruner data squad` writes): the threshold then keeps all of them, the
    # standard a question is judged by when several people marked its answer. Records without
    # meta.answers keep their relevant_spans either way
    every_answer: bool = True
    # score the calibration and report groups under bf16 autocast (about twice as fast where bf16
    # is native; thresholds match fp32 inference, docs/experiments/results-log.md). auto: where bf16 is native
    # (the same choice as train.mixed_precision: auto); yes / no (true / false): always / never
    bf16: Literal["auto", "yes", "no"] = "auto"
    # a per-request threshold (core/threshold_model.py): requests are banded by how much they look
    # like the calibration slices that need a low threshold, each band with its own threshold, all
    # chosen so that every slice keeps the target; a request left to the checkpoint is thresholded
    # by its band's (docs/design.md)
    per_request: bool = True
    per_request_bands: int = 8  # bands of equal share of the calibration groups
    # shares of calibration requests an answerability classifier may set apart, each band's share
    # getting a threshold of its own (the fit tries none and each, keeps what compresses most);
    # empty: no answer split. Off by default: on the quickstart it compressed the held-back splits
    # a little more but kept fewer of their answers than the calibration slices (docs/design.md)
    per_request_answer_shares: list[float] = field(default_factory=list)
    # [quantile, tail]: a request farther (Mahalanobis distance of its features) from the
    # calibration requests than `quantile` of them gets at most the threshold under which every
    # slice keeps `tail` of its answers; null: none. Text unlike all calibration text needs far
    # lower thresholds than any band (docs/design.md)
    per_request_novelty: list[float] | None = field(default_factory=lambda: [0.95, 0.995])
    # the highest passage relevance gate those unfamiliar requests face (the relevance head's
    # probabilities fall on text unlike its training text too); null: the bands' gate
    unfamiliar_gate: float | None = 0.02

    def __post_init__(self) -> None:
        self._check_settings()
        self._check_shifts()
        self._check_targets()
        self._check_score_rules()

    def _check_settings(self) -> None:
        bands = self.per_request_bands
        if isinstance(bands, bool) or not isinstance(bands, int) or not 1 <= bands <= 32:
            raise ConfigError(f"calibration.per_request_bands must be a whole number in 1-32, got {bands!r}")
        shares = self.per_request_answer_shares
        if not isinstance(shares, list | tuple) or not all(
            isinstance(x, int | float) and not isinstance(x, bool) and 0 < x < 1 for x in shares
        ):
            raise ConfigError(
                f"calibration.per_request_answer_shares must be a list of shares in (0, 1), got {shares!r}"
            )
        novelty = self.per_request_novelty
        if novelty is not None and not (
            isinstance(novelty, list | tuple)
            and len(novelty) == 2
            and all(isinstance(x, int | float) and not isinstance(x, bool) for x in novelty)
            and 0 < novelty[0] < 1
            and 0 < novelty[1] <= 1
        ):
            raise ConfigError(
                "calibration.per_request_novelty must be [quantile in (0, 1), tail in (0, 1]] or null, "
                f"got {novelty!r}"
            )
        gate = self.unfamiliar_gate
        if gate is not None and not (
            isinstance(gate, int | float) and not isinstance(gate, bool) and 0 <= gate <= 1
        ):
            raise ConfigError(f"calibration.unfamiliar_gate must be in [0, 1] or null, got {gate!r}")
        if isinstance(self.bf16, bool):  # the Python API's CalibrationSection(bf16=True)
            self.bf16 = "yes" if self.bf16 else "no"
        if self.bf16 not in ("auto", "yes", "no"):
            raise ConfigError(f"calibration.bf16 must be auto, yes or no, got {self.bf16!r}")
        if not 0.0 <= self.slice_tolerance < 0.5:
            raise ConfigError(f"calibration.slice_tolerance must be in [0, 0.5), got {self.slice_tolerance}")
        if not 0.0 <= self.uncertain_share < 1.0:
            raise ConfigError(f"calibration.uncertain_share must be in [0, 1), got {self.uncertain_share}")
        if self.summary_target is not None and not 0.0 < self.summary_target <= 1.0:
            raise ConfigError(
                f"calibration.summary_target must be in (0, 1] or null, got {self.summary_target}"
            )
        if self.shift_groups is not None and self.shift_groups < 1:
            raise ConfigError(f"calibration.shift_groups must be >= 1 or null, got {self.shift_groups}")

    def _check_shifts(self) -> None:
        from pruner_model.evaluation.shifts import shift_parts

        for name in self.shifts:
            if not isinstance(name, str):
                raise ConfigError(
                    f"calibration.shifts: each must be a slice name such as noisy, got {name!r}"
                )
            try:
                parts = shift_parts(name)
            except ValueError as exc:
                raise ConfigError(f"calibration.shifts: {exc}") from None
            if parts == ["as_is"]:
                raise ConfigError("calibration.shifts: as_is is the calibration groups themselves")

    def _check_targets(self) -> None:
        if not 0.0 < self.target_evidence <= 1.0:
            raise ConfigError(f"calibration.target_evidence must be in (0, 1], got {self.target_evidence}")
        if not 0.0 <= self.margin < 1.0 or self.target_evidence + self.margin > 1.0:
            raise ConfigError(
                f"calibration.margin must be >= 0 with target_evidence + margin <= 1, got {self.margin}"
            )
        if self.confidence is not None:  # the metric's own check
            from pruner_model.evaluation.statistics import check_confidence

            try:
                check_confidence(self.confidence)
            except ValueError as exc:
                raise ConfigError(f"calibration.{exc} (or null)") from None

    def _check_score_rules(self) -> None:
        if self.relevance_exponents:  # the model's own check (imported only when there is one)
            from pruner_model.core.score_rules import check_relevance_exponent

            for e in self.relevance_exponents:
                try:
                    check_relevance_exponent(e)
                except ValueError as exc:
                    raise ConfigError(f"calibration.relevance_exponents: {exc}") from None
                if e == 0:  # 0 (the token head alone) is always a candidate
                    raise ConfigError(
                        "calibration.relevance_exponents: list exponents > 0; 0 is always tried"
                    )
        from pruner_model.core.score_rules import check_relative_floor, check_relevance_contrast
        from pruner_model.evaluation.calibration import CHOOSE_BY

        if self.choose_by not in CHOOSE_BY:
            raise ConfigError(
                f"calibration.choose_by must be one of {', '.join(CHOOSE_BY)}, got {self.choose_by!r}"
            )
        try:
            check_relevance_contrast(self.relevance_contrast)
        except ValueError as exc:
            raise ConfigError(f"calibration.{exc}") from None
        if self.relevance_contrast and not self.relevance_exponents:
            raise ConfigError(
                "calibration.relevance_contrast acts on relevance-weighted scores: list relevance_exponents too"
            )
        for f in self.relative_floors:  # the model's own check
            try:
                if isinstance(f, bool) or not isinstance(f, int | float) or f is None:
                    raise ValueError(f"relative_floor must be in (0, 1], got {f!r}")
                check_relative_floor(f)
            except ValueError:
                raise ConfigError(f"calibration.relative_floors: each must be in (0, 1], got {f!r}") from None
