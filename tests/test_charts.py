"""The charts on hand-made results: eval's per-bucket accuracy and policy comparison (and the
confusion matrix), and bench voice's per-stage latency histogram on recorded numbers. Each file
is a real PNG that shows what it was given; empty input is refused with a clear error."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from evaluation.cases import Case
from evaluation.charts import (ChartError, chart_path, save_bucket_chart, save_compare_chart, save_confusion_png,
                               warn_if_empty)
from evaluation.metrics import CaseResult, Metrics, TurnRecord, case_failures, evaluate_metrics
from policy.config import Costs
from policy.decision import Action, Decision, Reason
from voice_agent.bench_charts import LatencyChartError, finite_samples, save_latency_histograms

pytestmark = pytest.mark.unit

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ACCURACY_BLUE = (0x1f, 0x6f, 0xeb)  # the action-accuracy bars (and the histogram bars)


def _result(cid: str, bucket: str, expected: Action, got: Action) -> CaseResult:
    c = Case.model_validate({"id": cid, "bucket": bucket, "question": "q?", "expect": {"action": expected.value}})
    reasons = [] if got == Action.answer else [Reason.no_relevant_evidence]
    d = Decision(action=got, message="ok", reasons=reasons)
    turns = [TurnRecord(case_id=cid, bucket=bucket, index=0, question="q?", expected=[expected], decision=d)]
    return CaseResult(case=c, turns=turns, failures=case_failures(c, turns))


def _metrics(right: int, wrong: int) -> Metrics:
    """Two buckets: `refusals` all right, `mixed` with `right` refusals right and `wrong` answered."""
    R, A = Action.refuse, Action.answer
    results = [_result(f"r{i}", "refusals", R, R) for i in range(3)]
    results += [_result(f"m{i}", "mixed", R, R) for i in range(right)]
    results += [_result(f"w{i}", "mixed", R, A) for i in range(wrong)]
    return evaluate_metrics(results, Costs())


def _png(path: Path) -> np.ndarray:
    assert path.read_bytes()[:8] == PNG_MAGIC
    with Image.open(path) as img:
        img.verify()
    with Image.open(path) as img:
        return np.asarray(img.convert("RGB")).astype(int)


def _pixels(img: np.ndarray, rgb: tuple[int, int, int], tol: int = 12) -> int:
    return int((np.abs(img - np.array(rgb)).max(axis=2) <= tol).sum())


def test_bucket_chart_is_a_png_whose_bars_follow_the_accuracy(tmp_path):
    good = _metrics(right=4, wrong=0)
    poor = _metrics(right=1, wrong=3)
    assert good["buckets"]["mixed"]["action_accuracy"] == 1.0 and poor["buckets"]["mixed"]["action_accuracy"] == 0.25
    a = _png(save_bucket_chart(good["buckets"], tmp_path / "good_buckets.png", "good"))
    b = _png(save_bucket_chart(poor["buckets"], tmp_path / "poor_buckets.png", "poor"))
    assert a.shape == b.shape and a.shape[0] > 150 and a.shape[1] > 400
    blue_good, blue_poor = _pixels(a, ACCURACY_BLUE), _pixels(b, ACCURACY_BLUE)
    # one bar at 1.0 in both; the mixed bucket's bar is full in one chart, a quarter in the other
    assert blue_poor > 0 and 1.3 < blue_good / blue_poor < 2.0, (blue_good, blue_poor)


def test_compare_chart_and_confusion_png(tmp_path):
    per = {"gated": _metrics(4, 0), "threshold": _metrics(1, 3), "minimal": _metrics(2, 2)}
    img = _png(save_compare_chart(per, tmp_path / "r_compare.png", "policies"))
    assert img.shape[1] > img.shape[0]  # three panels side by side
    for colour in [(0x1f, 0x6f, 0xeb), (0xbf, 0x87, 0x00), (0x8c, 0x95, 0x9f)]:  # one per policy
        assert _pixels(img, colour) > 100, colour
    _png(save_confusion_png(per["threshold"], tmp_path / "r.confusion.png", "threshold"))


def test_charts_refuse_empty_input_with_a_clear_error(tmp_path):
    with pytest.raises(ChartError, match="bucket chart: no buckets"):
        save_bucket_chart({}, tmp_path / "b.png", "x")
    with pytest.raises(ChartError, match="compare chart: no policies"):
        save_compare_chart({}, tmp_path / "c.png", "x")
    empty = evaluate_metrics([], Costs())
    with pytest.raises(ChartError, match="confusion chart: no scored turns"):
        save_confusion_png(empty, tmp_path / "m.png", "x")
    with pytest.raises(LatencyChartError, match="no stage has a measured turn"):
        save_latency_histograms({}, tmp_path / "l.png", "x")
    with pytest.raises(LatencyChartError):
        save_latency_histograms({"total": [], "asr": [math.nan]}, tmp_path / "l.png", "x")
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_eval_names_its_charts_and_warns_on_an_empty_one(tmp_path, capsys):
    out = tmp_path / "results.gated.jsonl"
    assert chart_path(out, "confusion").name == "results.gated.confusion.png"
    assert chart_path(out, "buckets").name == "results.gated_buckets.png"
    assert chart_path(tmp_path / "results.jsonl", "compare").name == "results_compare.png"
    # the CLI still writes its results when a chart has nothing to draw: one warning line, no path
    assert warn_if_empty(lambda: save_bucket_chart({}, tmp_path / "b.png", "x")) == ""
    assert capsys.readouterr().err == "warning: bucket chart: no buckets (no case was scored)\n"
    assert warn_if_empty(lambda: save_bucket_chart(_metrics(1, 1)["buckets"], tmp_path / "b.png", "x")) == str(
        tmp_path / "b.png")


# Recorded by `run.py bench voice --limit 4 --out DIR` (voice_latency.json, milliseconds per turn).
RECORDED = [
    {"total": 1025.61, "endpoint": 583.12, "asr_wait": 0.11, "asr": 138.97, "retrieve": 5.89, "policy": 8.13,
     "tts_first_audio": 327.02},
    {"total": 998.49, "endpoint": 715.45, "asr_wait": 0.12, "asr": 131.9, "retrieve": 9.57, "policy": 1.79,
     "tts_first_audio": 175.04},
    {"total": 891.38, "endpoint": 662.44, "asr_wait": 0.11, "asr": 140.28, "retrieve": 9.33, "policy": 1.24,
     "tts_first_audio": 201.07},
    {"total": 913.35, "endpoint": 486.56, "asr_wait": 0.08, "asr": 222.29, "retrieve": 11.04, "policy": 1.91,
     "tts_first_audio": 386.03},
]


def test_latency_histograms_from_recorded_numbers(tmp_path):
    stages = ["total", "endpoint", "asr_wait", "asr", "retrieve", "policy", "tts_first_audio"]
    samples = {s: [r[s] for r in RECORDED] for s in stages}
    samples["speculative_only"] = [math.nan] * 4  # a stage no turn had: left out, not drawn empty
    assert list(finite_samples(samples)) == stages
    seven = _png(save_latency_histograms(samples, tmp_path / "voice_latency.png", "bench voice"))
    one = _png(save_latency_histograms({"total": samples["total"]}, tmp_path / "one.png", "bench voice"))
    assert seven.shape[0] > one.shape[0] and seven.shape[1] > one.shape[1]  # a panel per stage, in a grid
    assert _pixels(seven, ACCURACY_BLUE) > 6 * _pixels(one, ACCURACY_BLUE) > 0
