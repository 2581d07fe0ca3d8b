"""Server side of a round, independent of the transport that carries it.

A round has up to two phases. Labeling (pseudo-label methods, a labeling event every f
rounds): `plan_labeling(r)` picks n clients that relabel their pools with the global model,
and `finish_labeling(r, results)` records how many labels each now holds. Training:
`plan(r)` samples clients holding gold or pseudo labels; `finish_round(r, updates)`
validates, aggregates through the aggregator's FedML hooks, evaluates and records. Under
adaptive pacing both phases also carry the pacing trials' tasks, on idle clients, and
`finish_round` scores each trial's throw-away model on the gold-label validation set. The in-process
runtime calls these in a loop; the MPI and cross-silo managers call them from message
handlers. One round logic, several transports.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from typing import Any, Callable

import numpy as np
import torch

from ..cost.accounting import TaskRecord, task_seconds
from ..cost.network import Network
from ..cost.profiles import load_profile
from ..data.federated import FederatedData
from ..data.readers import LabeledTexts, stratified_subsample
from ..errors import FesError
from ..pseudo.pacing import Pacing, PacingConfigurator, parse_grid
from ..pseudo.prototypes import GoldPrototypes
from ..report.client_costs import ClientCostLog, cost_row
from ..report.metrics import RunRecorder
from ..tuning.autoconfig import AdapterView, expand_update, slice_update
from ..tuning.params import payload_bytes, validate_update
from .aggregator import AggregatorLike
from .job import Job
from .tasks import ClientTask, ClientUpdate, task_seed

log = logging.getLogger(__name__)


LABEL_COLUMNS = (
    "label_clients",
    "pseudo_labeled",
    "pseudo_acc",
    "inferred",
    "inferred_fraction",
    "label_compute_s_max",
    "label_bytes_down",
)


def _sent_bytes(params: Any) -> int:
    """Bytes of an update as sent; a malformed one (rejected anyway) counts its tensors only."""
    try:
        return payload_bytes(params)
    except (AttributeError, TypeError):
        return sum(
            t.numel() * t.element_size() for t in getattr(params, "values", list)() if isinstance(t, torch.Tensor)
        )


def gold_validation_set(data: FederatedData, limit: int, seed: int) -> LabeledTexts | None:
    """Validation data from the gold-labeled clients, never the test split: the gold labels
    held out of training where the method decides on them (`data.validation`: AUG-E pacing,
    AutoFedNLP's configurator), else the training gold labels (logged as val_acc only). In a
    deployment the gold clients would evaluate the global model on them and report the accuracy."""
    if data.validation is not None:
        return stratified_subsample(data.validation, limit, seed)
    gold = data.pooled_gold()
    return stratified_subsample(gold, limit, seed) if gold is not None else None


class RoundServer:
    def __init__(self, job: Job, aggregator: AggregatorLike, recorder: RunRecorder):
        self.job = job
        self.aggregator = aggregator
        self.recorder = recorder
        self.cost_log = ClientCostLog(recorder.run_dir)  # per-client task records for the cost emulation
        self.cfg = job.cfg
        self._gold_eligible = job.method.eligible_clients(job.data)
        self._gold_counts = {c.client_id: c.num_gold for c in job.data.clients if c.num_gold}
        self._round_started = time.perf_counter()
        self.pseudo_counts: dict[int, int] = {}
        self._label_row: dict[str, Any] = {}
        self._client_dists = self._client_class_distributions()
        self.initial = self.aggregator.test(job.data.test, job.device, self.cfg.flat_args())
        self.last_test = _class_details(self.initial)  # per-class accuracy, confusion, majority rate
        self.last_scores = {k: v for k, v in self.initial.items() if k not in CLASS_DETAILS}
        # the global tensors as last set here (in process clients may train the same model object)
        self._global = self.aggregator.get_model_params()
        self._park: Callable[[Any], Any] = lambda params: params  # a spilling runtime parks them on disk
        self._setup_pacing()
        self._setup_configurator()

    def _setup_pacing(self) -> None:
        """count: FedFSL's constant count per event; static: one <f, n, k>; adaptive: Algorithm 1."""
        mode = getattr(self.job.method, "pacing_mode", lambda _c: "count")(self.cfg)
        pc = self.cfg.pacing
        self.pacing_mode = mode if self.job.method.uses_pseudo else "none"
        self.static_pacing = Pacing(pc.f, pc.n, pc.k)
        self.events = 0  # global labeling events so far
        self.fraction = 0.0  # budget after the last event: share of each participant's pool
        self._last_event: int | None = None
        self._trial_of: dict[int, int] = {}  # this round: client id -> index of its running trial
        self._trial_counts: dict[int, int] = {}  # pseudo labels each trial client holds
        self._trainers: list[int] = []  # this round's training sample, drawn in plan_labeling
        self.prototypes = GoldPrototypes(self.cfg.pseudo.labeler == "agree", list(self._gold_counts))
        self.pacer: PacingConfigurator | None = None
        self.val_set = (
            gold_validation_set(self.job.data, pc.val_examples, self.cfg.common.random_seed)
            if self.job.method.primary_metric == "test_acc"
            else None
        )
        self.last_val = self._validate() if self.val_set is not None else float("nan")
        self.initial_val = self.last_val
        if self.pacing_mode == "adaptive":
            if self.val_set is None:
                raise FesError("adaptive pacing scores configurations on the gold labels, but no client holds one")
            self.pacer = PacingConfigurator(parse_grid(pc.grid), pc)

    def _setup_configurator(self) -> None:
        """AutoFedNLP's online adapter configuration (adapter_args.configurator: progressive):
        each round's clients split into the main and trial views (`plan`), scored in
        `finish_round` on the gold-label validation set and the emulated device's seconds."""
        make = getattr(self.job.method, "configurator", None)
        self.autoconf = make(self.cfg) if make is not None else None
        self._view_of: dict[int, AdapterView] = {}  # this round: client id -> its view
        if self.autoconf is None:
            return
        if self.val_set is None:
            raise FesError(
                "the progressive adapter configurator scores configurations on the gold labels, but no client holds one"
            )
        c = self.cfg.cost
        self._device = load_profile(c.devices[0] if c.devices else "jetson_tx2", c.device_dir or None)
        self._network = Network(c.bandwidth_MBps, c.uplink_MBps or c.bandwidth_MBps, c.message_overhead_s)
        self.recorder.log_event(
            f"configurator: start at {self.autoconf.main.name} (adapters from layer "
            f"{self.autoconf.main.depth}, width {self.autoconf.main.width}); capacity from layer "
            f"{self.autoconf.min_depth}, width {self.autoconf.max_width}; device "
            f"{self._device.name}"
        )

    def state_dict(self) -> dict[str, Any]:
        """What later rounds read, taken between rounds (after `finish_round`, before the next
        `plan_labeling`), as plain data and tensors for a run's checkpoint
        (`runtime/checkpoint.py`). Per-round scratch (`_trial_of`, `_trainers`, `_label_row`)
        is rebuilt by the next round's planning; everything else the rounds draw is seeded per
        (seed, round, client), so this and the client folders are the whole state. An attribute
        that later rounds read belongs here too: tests/test_resume.py compares runs killed and
        resumed with uninterrupted ones."""
        return {
            "global": OrderedDict((k, v.detach().to("cpu", copy=True)) for k, v in self._global.items()),
            "pseudo_counts": {int(c): int(n) for c, n in self.pseudo_counts.items()},
            "events": self.events,
            "fraction": self.fraction,
            "last_event": self._last_event,
            "trial_counts": {int(c): int(n) for c, n in self._trial_counts.items()},
            "prototypes": self.prototypes.value,
            "pacer": self.pacer.state_dict() if self.pacer is not None else None,
            "last_val": self.last_val,
            "initial_val": self.initial_val,
            "initial": _plain(self.initial),
            "last_test": _plain(self.last_test),
            "last_scores": _plain(self.last_scores),
            "configurator": self.autoconf.state_dict() if self.autoconf is not None else None,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue after the round `state` was taken at: the global tensors go into the
        aggregator's model as well."""
        self._global = self._park(OrderedDict(state["global"]))
        self.aggregator.set_model_params(self._global)
        self.pseudo_counts = dict(state["pseudo_counts"])
        self.events, self.fraction, self._last_event = state["events"], state["fraction"], state["last_event"]
        self._trial_counts = dict(state["trial_counts"])
        self.prototypes.value = state.get("prototypes")
        if self.pacer is not None and state["pacer"] is not None:
            self.pacer.load_state_dict(state["pacer"])
        self.last_val, self.initial_val = state["last_val"], state["initial_val"]
        self.initial, self.last_test, self.last_scores = state["initial"], state["last_test"], state["last_scores"]
        if self.autoconf is not None and state.get("configurator") is not None:
            self.autoconf.load_state_dict(state["configurator"])

    def _validate(self) -> float:
        """The validation signal AUG-E's delta_acc is measured in (pacing_args.val_signal); the
        accuracy and the true labels' mean negative log-likelihood are kept for the metrics row."""
        scores = self.aggregator.test(self.val_set, self.job.device, self.cfg.flat_args())
        self.val_accuracy, self.val_nll = float(scores["test_acc"]), float(scores["test_nll"])
        if self.cfg.pacing.val_signal == "log_likelihood":
            return -self.val_nll
        return self.val_accuracy

    def current_pacing(self) -> Pacing | None:
        if self.pacing_mode == "adaptive":
            return self.pacer.current
        return self.static_pacing if self.pacing_mode == "static" else None

    def _client_class_distributions(self) -> np.ndarray | None:
        """Each client's true class mix (evaluator side, via the oracle) for per-client accuracy."""
        job = self.job
        if job.oracle is None or job.method.primary_metric != "test_acc":
            return None
        dists = np.zeros((job.data.num_clients, len(job.data.classes)))
        for c in job.data.clients:
            labels = list(c.gold_labels) + job.oracle.labels_of(list(c.unlabeled.example_ids))
            dists[c.client_id] = np.bincount(labels, minlength=len(job.data.classes)) / max(len(labels), 1)
        return dists

    @property
    def num_rounds(self) -> int:
        return self.cfg.train.comm_round

    def eligible(self) -> list[int]:
        """Clients that can train: gold holders, plus pseudo-label holders."""
        return sorted(set(self._gold_eligible) | {c for c, n in self.pseudo_counts.items() if n > 0})

    def sample_clients(self, round_idx: int, also: list[int] = (), busy: set[int] = frozenset()) -> list[int]:
        """Seeded per round, among the clients the method can train (`also`: this round's
        labelers, about to hold pseudo labels; `busy`: in a pacing trial). Uniform, or under
        curriculum pacing with `pacing_args.train_sampling: labels`, in proportion to the
        labels each client holds (a labeler counts at least one); the same for any pseudo-labeling
        method with `pseudo_args.sample_by_labels`. A pseudo label counts
        `pseudo_args.sample_weight` of a gold one, as in FedAvg's average. With
        `pseudo_args.gold_every_round` the gold-label holders take their places first."""
        eligible = sorted((set(self.eligible()) | set(also)) - busy)
        k = min(self.cfg.train.client_num_per_round, len(eligible))
        rng = np.random.default_rng([self.cfg.common.random_seed, round_idx, 1])
        fixed: list[int] = []
        if self.job.method.uses_pseudo and self.cfg.pseudo.gold_every_round:
            gold = [c for c in eligible if self._gold_counts.get(c, 0)]
            fixed = gold if len(gold) <= k else sorted(int(c) for c in rng.choice(gold, size=k, replace=False))
            eligible, k = [c for c in eligible if c not in fixed], k - len(fixed)
        weights = None
        curriculum = self.pacing_mode in ("adaptive", "static") and self.cfg.pacing.train_sampling == "labels"
        if curriculum or (self.job.method.uses_pseudo and self.cfg.pseudo.sample_by_labels):
            lam = self.cfg.pseudo.sample_weight
            held = np.array(
                [
                    max(min(1.0, lam), self._gold_counts.get(c, 0) + lam * self.pseudo_counts.get(c, 0))
                    for c in eligible
                ],
                dtype=float,
            )
            weights = held / held.sum() if len(held) else None
        return sorted(fixed + [int(c) for c in rng.choice(eligible, size=k, replace=False, p=weights)])

    def labeling_due(self, round_idx: int) -> bool:
        """A global labeling event: every f rounds of the current configuration (or
        pseudo_args.label_every), from pseudo_args.start_round on."""
        p = self.cfg.pseudo
        if not self.job.method.uses_pseudo or round_idx < p.start_round:
            return False
        pacing = self.current_pacing()
        every = pacing.f if pacing is not None else p.label_every
        if self._last_event is not None and round_idx - self._last_event < every:
            return False
        if p.skip_if_worse_than_zero_shot and self.last_val < self.initial_val:  # gold labels, never test
            self.recorder.log_event(f"round {round_idx}: labeling skipped, model below zero-shot accuracy")
            return False
        return True

    def plan_labeling(self, round_idx: int) -> list[ClientTask]:
        """The round's labeling event (n clients, seeded per round), plus the pacing trials'."""
        self._round_started = time.perf_counter()
        self._label_row = dict.fromkeys(LABEL_COLUMNS, float("nan")) if self.job.method.uses_pseudo else {}
        self._trial_of = {}
        seed = self.cfg.common.random_seed
        tasks: list[ClientTask] = []
        before = self.fraction
        chosen: list[int] = []
        busy = self.pacer.busy_clients() if self.pacer is not None else set()
        if self.labeling_due(round_idx):
            pacing = self.current_pacing()
            pool = [c.client_id for c in self.job.data.clients if len(c.unlabeled) and c.client_id not in busy]
            k = min(pacing.n if pacing is not None else self.cfg.pseudo.label_clients, len(pool))
            rng = np.random.default_rng([seed, round_idx, 2])
            chosen = sorted(int(c) for c in rng.choice(pool, size=k, replace=False)) if k else []
            self.events, self._last_event = self.events + 1, round_idx
            options = self.prototypes.options({})
            if pacing is not None:
                self.fraction += pacing.k / 100.0
                options["fraction"] = self.fraction
            tasks += [ClientTask(round_idx, c, "label", task_seed(seed, round_idx, c), dict(options)) for c in chosen]
        # the training sample is drawn now (the same draw as after labeling: every labeler
        # ends with labels), so that trials can take the clients the main model leaves idle
        self._trainers = self.sample_clients(round_idx, also=chosen, busy=busy)
        if self.pacer is not None and round_idx >= self.cfg.pseudo.start_round:
            tasks += self._plan_trial_labeling(round_idx, set(chosen) | set(self._trainers), before)
        gold = self.prototypes.wanted({t.client_id for t in tasks})  # labeler agree: gold clients' class sums
        return tasks + [ClientTask(round_idx, c, "prototypes", task_seed(seed, round_idx, c)) for c in gold]

    def _plan_trial_labeling(self, round_idx: int, main: set[int], fraction: float) -> list[ClientTask]:
        """Start waiting trials on idle clients: neither labeling nor training for the main
        model this round (a trial client's own labels stay untouched: it labels apart)."""
        idle = [c.client_id for c in self.job.data.clients if len(c.unlabeled) and c.client_id not in main]
        rng = np.random.default_rng([self.cfg.common.random_seed, round_idx, 4])
        for event in self.pacer.start_trials(round_idx, idle, fraction, rng):
            self.recorder.log_event(f"round {round_idx}: {event}")
        seed = self.cfg.common.random_seed
        tasks = []
        for i, trial in enumerate(self.pacer.running):
            self._trial_of.update({c: i for c in trial.group})
            if trial.labels_in(round_idx):
                events = (round_idx - trial.start_round) // trial.config.f + 1
                fraction = trial.fraction + events * trial.config.k / 100.0
                options = self.prototypes.options({"fraction": fraction, "trial": i})
                tasks += [
                    ClientTask(round_idx, c, "label", task_seed(seed, round_idx, c), dict(options)) for c in trial.group
                ]
        return tasks

    def finish_labeling(self, round_idx: int, results: list[ClientUpdate]) -> None:
        results = sorted(results, key=lambda u: u.client_id)
        down = payload_bytes(self.global_params()) + self.prototypes.bytes_down
        self.cost_log.append(  # up: a gold client's class sums (labeler agree); a labeling pass sends no tensors
            [cost_row(round_idx, "label", r.client_id, r.metrics, down, payload_bytes(r.params)) for r in results]
        )
        results = self.prototypes.absorb(results)
        for r in results:
            if r.client_id in self._trial_of:
                self._trial_counts[r.client_id] = int(r.metrics.get("pseudo_count", 0))
        results = [r for r in results if r.client_id not in self._trial_of]
        if not results:
            return
        ids: list[int] = []
        labels: list[int] = []
        for r in results:
            self.pseudo_counts[r.client_id] = int(r.metrics.get("pseudo_count", 0))
            ids += list(r.report.get("example_ids", []))
            labels += list(r.report.get("labels", []))
        oracle = self.job.oracle
        self._label_row = {
            "label_clients": [r.client_id for r in results],
            "pseudo_labeled": len(ids),
            "pseudo_acc": oracle.accuracy(ids, labels) if oracle is not None else float("nan"),
            "inferred": int(sum(r.metrics.get("inferred", 0) for r in results)),
            "inferred_fraction": (
                sum(r.metrics.get("inferred", 0) for r in results)
                / max(1.0, sum(r.metrics.get("pool", 0) for r in results))
            ),
            "label_compute_s_max": max((r.metrics.get("compute_s", 0.0) for r in results), default=0.0),
            "label_bytes_down": down * len(results),
        }

    def plan(self, round_idx: int) -> list[ClientTask]:
        if not self.job.method.uses_pseudo:
            self._round_started = time.perf_counter()
        seed = self.cfg.common.random_seed
        kind = self.job.method.train_kind
        trials = [
            ClientTask(round_idx, c, kind, task_seed(seed, round_idx, c), {"trial": i})
            for c, i in sorted(self._trial_of.items())
            if self._trial_counts.get(c, 0) > 0
        ]
        self._view_of = self.autoconf.assign(round_idx, self._trainers) if self.autoconf is not None else {}
        return [
            ClientTask(
                round_idx,
                c,
                kind,
                task_seed(seed, round_idx, c),
                {"view": self._view_of[c].as_option()} if c in self._view_of else {},
            )
            for c in self._trainers
        ] + trials

    def park_global(self, park: Callable[[Any], Any]) -> None:
        """Keep the global tensors wherever `park` puts them, now and after every aggregation:
        the in-process runtime parks a full model's on disk (`runtime.spill.GlobalSpill`), since
        between the reads (sending, screening, averaging) its 0.54 GB (SmolLM2) would sit beside
        a training client's model and optimizer."""
        self._park = park
        self._global = park(self._global)

    def global_params(self) -> "OrderedDict[str, torch.Tensor]":
        """What the runtimes send down: the trainable tensors (under the adapter configurator,
        sliced to the union of this round's views). Without the configurator these are the
        server's own global tensors, not a copy (the model holds them too at a phase's start):
        callers only read them, and a full-model copy per call cost 0.54 GB on SmolLM2."""
        if getattr(self, "autoconf", None):
            return slice_update(self.aggregator.get_model_params(), self.autoconf.union())
        return self._global

    def _accepted(self, round_idx: int, updates: list[ClientUpdate], reference) -> list[ClientUpdate]:
        """Updates whose structure passes (keys, shapes, dtypes) with a positive weight. Their
        values (finite, within bounds) are screened where every update is averaged, in the
        aggregator (`FedAvgCore.aggregate`), which logs its rejections here too: one pass over
        the tensors instead of two (a finite-value pass here cost ~0.1 s per 90.9 MB update)."""
        accepted: list[ClientUpdate] = []
        for u in updates:
            try:
                validate_update(u.params, reference, f"client {u.client_id}", finite=False)
                if not (np.isfinite(u.weight) and u.weight > 0):
                    raise FesError(f"update from client {u.client_id} has weight {u.weight}")
                accepted.append(u)
            except FesError as e:
                self.recorder.log_event(f"round {round_idx}: rejected {e}")
        return accepted

    def _aggregate(self, round_idx: int, updates: list[ClientUpdate], reference, logged: set[int] | None = None):
        """The aggregator's FedAvg of `updates` through FedML's hooks, with the clients named:
        (the updates it kept, the new global tensors; None when it rejected every one). Its
        rejections (robust aggregation) are logged in events.log (`logged`: only these clients')."""
        raw, idxs = self.aggregator.on_before_aggregation([(u.weight, u.params) for u in updates])
        order = [updates[i] for i in idxs] if len(idxs) == len(raw) else updates
        names = [f"client {u.client_id}" for u in order]
        quiet = tuple(
            f"update from client {u.client_id} " for u in order if logged is not None and u.client_id not in logged
        )

        def on_reject(reason: str) -> None:
            if not reason.startswith(quiet):
                self.recorder.log_event(f"round {round_idx}: rejected {reason}")

        new = self.aggregator.aggregate(raw, senders=names, on_reject=on_reject, reference=reference)
        dropped = {i for i, _ in getattr(self.aggregator, "last_rejected", ())}
        out = {id(u) for i, u in enumerate(order) if i not in dropped}
        kept = [u for u in updates if id(u) in out]
        return kept, (self.aggregator.on_after_aggregation(new) if kept else None)

    def _score_trials(
        self, round_idx: int, trial_updates: list[ClientUpdate], reference, main: list[ClientUpdate], baseline: float
    ) -> list[ClientUpdate]:
        """Each running trial's group updates, averaged with the round's main updates into a
        throw-away model from the global one: the round as it would have been had the trial's
        configuration labeled too. Its validation minus `baseline` (pacing_args.trial_baseline)
        feeds the trial's AUG-E. (A trial group alone holds a few pseudo labels and no gold
        label: averaged on their own, every configuration scored a loss and AUG-E ranked the
        costliest first.) Returns the trial updates the aggregator kept."""
        gains: dict[int, float] = {}
        kept: list[ClientUpdate] = []
        for i, _trial in enumerate(self.pacer.running):
            mine = [u for u in trial_updates if self._trial_of.get(u.client_id) == i]
            if mine:
                self.aggregator.set_model_params(reference)  # every trial starts from the global model
                ok, new = self._aggregate(round_idx, main + mine, reference, logged={u.client_id for u in mine})
                kept += [u for u in ok if u.client_id in {m.client_id for m in mine}]
                if new is not None:
                    self.aggregator.set_model_params(new)
                    gains[i] = self._validate() - baseline
        self.aggregator.set_model_params(reference)
        for event in self.pacer.finish_trial_round(round_idx, gains):
            self.recorder.log_event(f"round {round_idx}: {event}")
        return sorted(kept, key=lambda u: u.client_id)

    def _expanded(self, round_idx: int, updates: list[ClientUpdate], reference) -> list[ClientUpdate]:
        """Updates of configured clients laid over the global tensors (`autoconfig.expand_update`);
        one that does not fit its view is logged and dropped."""
        out = []
        for u in updates:
            view = self._view_of.get(u.client_id)
            if view is None:
                out.append(u)
                continue
            try:
                out.append(
                    ClientUpdate(
                        u.round_idx,
                        u.client_id,
                        expand_update(u.params, reference, view, f"client {u.client_id}"),
                        u.weight,
                        u.metrics,
                        u.report,
                    )
                )
            except FesError as e:
                self.recorder.log_event(f"round {round_idx}: rejected {e}")
        return out

    def _configure(self, round_idx: int, accepted: list[ClientUpdate], reference, sent: dict[int, int], down: int):
        """AutoFedNLP's step: each view's group averaged on its own from the global model and
        scored on the gold validation set, its cost the mean emulated device seconds of its
        clients' tasks. Returns (the updates that form the new global: the main view's, or on
        an upgrade the winning trial's)."""
        groups: dict[AdapterView, list[ClientUpdate]] = {}
        for u in accepted:
            groups.setdefault(self._view_of[u.client_id], []).append(u)
        gains: dict[AdapterView, float] = {}
        costs: dict[AdapterView, float] = {}
        for view, group in groups.items():
            self.aggregator.set_model_params(reference)
            quiet = view == self.autoconf.main  # its rejections are logged when it forms the global
            ok, new = self._aggregate(round_idx, group, reference, logged=set() if quiet else None)
            if new is None:
                continue
            self.aggregator.set_model_params(new)
            gains[view] = self._validate() - self.last_val
            costs[view] = float(
                np.mean(
                    [
                        sum(
                            task_seconds(
                                TaskRecord.from_row(
                                    cost_row(round_idx, "train", u.client_id, u.metrics, down, sent[u.client_id])
                                ),
                                self._device,
                                self._network,
                            )
                        )
                        for u in group
                    ]
                )
            )
        self.aggregator.set_model_params(reference)
        main = self.autoconf.main
        events, upgraded = self.autoconf.finish_round(round_idx, gains, costs)
        for event in events:
            self.recorder.log_event(f"round {round_idx}: {event}")
        return groups.get(upgraded if upgraded is not None else main, [])

    def finish_round(self, round_idx: int, updates: list[ClientUpdate], planned: int | None = None) -> dict[str, Any]:
        reference = self._global
        updates = sorted(updates, key=lambda u: u.client_id)
        sent = {u.client_id: _sent_bytes(u.params) for u in updates}  # as they travelled (views: sliced)
        down = payload_bytes(self.global_params())  # as it travelled, before the configurator decides
        if self.autoconf is not None:
            updates = self._expanded(round_idx, updates, reference)
        accepted = self._accepted(round_idx, updates, reference)
        view_used = self.autoconf.main.name if self.autoconf is not None else ""
        configured = [u for u in accepted if u.client_id in self._view_of]
        if self.autoconf is not None and configured:
            accepted = self._configure(round_idx, configured, reference, sent, down)
        trial_updates = [u for u in accepted if u.client_id in self._trial_of]
        accepted = [u for u in accepted if u.client_id not in self._trial_of]
        pacing_used = str(self.current_pacing()) if self.current_pacing() is not None else ""
        new = None
        if accepted:
            due = self.pacer is not None and self.pacer.running
            if due and self.cfg.pacing.trial_baseline == "previous_model":
                trial_updates = self._score_trials(round_idx, trial_updates, reference, accepted, self.last_val)
            accepted, new = self._aggregate(round_idx, accepted, reference)  # the robust screen may reject more
            if due and new is not None and self.cfg.pacing.trial_baseline == "round_model":  # the round alone
                self.aggregator.set_model_params(new)
                trial_updates = self._score_trials(round_idx, trial_updates, reference, accepted, self._validate())
        travelled = (configured or accepted) + trial_updates  # every update the round received and used
        ok = {id(u) for u in accepted + trial_updates + configured}
        self.cost_log.append(
            [
                cost_row(round_idx, "train", u.client_id, u.metrics, down, sent[u.client_id], accepted=id(u) in ok)
                for u in updates
            ]
        )
        if not accepted:  # the global model stays as it was
            self.aggregator.set_model_params(reference)
            raise FesError(f"round {round_idx}: no valid client update to aggregate")
        self.aggregator.set_model_params(new)
        self._global = self._park(new)

        is_last = round_idx == self.num_rounds - 1
        scores: dict[str, float] = {}
        tested = is_last or (round_idx + 1) % self.cfg.train.frequency_of_the_test == 0
        if tested:
            scores = dict(self.aggregator.test(self.job.data.test, self.job.device, self.cfg.flat_args()))
            self.last_test = _class_details(scores)
            self.last_scores = {k: v for k, v in scores.items() if k not in CLASS_DETAILS}
        if self.val_set is not None:
            if self.pacer is not None or tested or self.cfg.pseudo.skip_if_worse_than_zero_shot:  # every round
                self.last_val = self._validate()
                scores["val_acc"], scores["val_nll"] = self.val_accuracy, self.val_nll
            scores.setdefault("val_acc", float("nan"))  # keep the columns from the first row on
            scores.setdefault("val_nll", float("nan"))
        if self.pacer is not None and round_idx >= self.cfg.pseudo.start_round:
            for event in self.pacer.observe(round_idx, self.last_val):
                self.recorder.log_event(f"round {round_idx}: {event}")
        per_class = scores.get("per_class_acc")
        for key in CLASS_DETAILS:  # lists: summary.json, not a metrics.csv column
            scores.pop(key, None)
        if per_class is not None and self._client_dists is not None:
            scores["client_mean_acc"] = float(np.mean(self._client_dists @ np.nan_to_num(np.asarray(per_class))))
        row: dict[str, Any] = {
            "round": round_idx,
            "clients": [u.client_id for u in accepted],
            "updates_planned": planned if planned is not None else len(updates),
            "updates_accepted": len(accepted),
            "train_loss": float(np.mean([u.metrics.get("train_loss", np.nan) for u in accepted])),
            "client_compute_s_max": max(u.metrics.get("compute_s", 0.0) for u in accepted),
            "bytes_down": down * len(travelled),
            "bytes_up": sum(sent[u.client_id] for u in travelled),  # pacing and configurator trials too
            self.job.method.primary_metric: scores.get(self.job.method.primary_metric, float("nan")),
            "pseudo_total": sum(self.pseudo_counts.values()),
            "pacing": pacing_used,
            **({"trial_updates": len(trial_updates)} if self.pacer is not None else {}),
            **({"adapter_view": view_used, "clients_trained": len(configured)} if self.autoconf is not None else {}),
            **self._label_row,
            "round_wall_s": time.perf_counter() - self._round_started,
        }
        row.update({k: v for k, v in scores.items() if k not in row})
        self.recorder.append(row)
        return row


CLASS_DETAILS = ("per_class_acc", "confusion", "majority_rate")


def _class_details(scores: dict[str, Any]) -> dict[str, Any]:
    return {k: scores[k] for k in CLASS_DETAILS if k in scores}


def _plain(value: Any) -> Any:
    """Scores as plain Python (numpy scalars and arrays to floats and lists): a checkpoint
    loads with torch.load(weights_only=True)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic, torch.Tensor)):
        return value.tolist()
    return value
