"""Event series writes pass the write fence like every write: through the fenced API client, the
create and the series PATCH go out while the Lease is held; once the term ended, the final count
of the series sends nothing and its failure is logged with the count it carried."""

from __future__ import annotations

from typing import Any

from structlog.testing import capture_logs

from scheduler.kube.event_series import SeriesKey
from scheduler.kube.events import WARNING, EventRecorder, ObjectRef
from scheduler.kube.fence import WriteFence
from tests.unit.scheduler.core_api_double import FakeClock
from tests.unit.scheduler.test_fence_client import Recorder, fenced_client, serving

POD = ObjectRef("Pod", "p", "ns", "uid-p")
NOTE = "0/1 nodes are available"


def emit(recorder: EventRecorder) -> None:
    recorder.emit(POD, WARNING, "FailedScheduling", "Scheduling", NOTE)


async def test_series_writes_are_fenced() -> None:
    server = Recorder()
    fence_clock = FakeClock(now=1.0)
    fence = WriteFence(fence_clock)
    fence.arm(10.0, 1.0)
    fence.renewed(0.0)  # held until 9
    series_clock = FakeClock()
    async with serving(server) as host, fenced_client(host, fence) as api:
        recorder = EventRecorder(api, "gpu-scheduler", "replica-a", clock=series_clock)
        emit(recorder)
        await recorder.drain(timeout=30)
        emit(recorder)
        await recorder.drain(timeout=30)
        series = recorder.series.get(
            SeriesKey(POD, WARNING, "FailedScheduling", "Scheduling", NOTE)
        )
        assert series is not None
        name = series.body["metadata"]["name"]
        assert server.requests == [
            "POST /apis/events.k8s.io/v1/namespaces/ns/events HTTP/1.1",
            f"PATCH /apis/events.k8s.io/v1/namespaces/ns/events/{name} HTTP/1.1",
        ]
        assert b"application/merge-patch+json" in server.received[-1]

        fence.revoke("the Lease was taken over")
        sent = server.bytes
        emit(recorder)  # count 3, in memory
        series_clock.now += 361  # the series ended: its final count is due
        with capture_logs() as logs:
            assert recorder.write_due() == 1
            await recorder.drain(timeout=30)
        assert server.bytes == sent  # nothing left this process
        failed: list[dict[str, Any]] = [e for e in logs if e["event"] == "event_write_failed"]
        assert [(e["count"], e["status"]) for e in failed] == [(3, 0)]
        assert "not sent" in failed[0]["error"]
        assert series.written == 2
