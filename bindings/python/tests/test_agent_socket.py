"""A Python job resident on a node, reaching the coordinator through its node
agent's job socket (``agent_socket=``), with every process real: the
coordinator, ``shockwave agent --job-socket``, and libshockwave.so."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import unittest

from tests.harness import Coordinator, free_port, shockwave_binary, wait_until

import shockwave


class TestAgentSocket(unittest.TestCase):
    def setUp(self) -> None:
        self.coord = Coordinator(gpus=0, round_s=1.0, policy="gavel", extra=["--agents"])
        self.coord.start()
        self.addCleanup(self.coord.stop)
        self.dir = tempfile.mkdtemp(prefix="shockwave-agent-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.sock = os.path.join(self.dir, "agent.sock")
        log = open(os.path.join(self.dir, "agent.log"), "w")
        self.addCleanup(log.close)
        self.agent = subprocess.Popen(
            [shockwave_binary(), "agent", "--node", "n0", "--gpus", "1", "--nats-url", self.coord.url,
             "--work-dir", os.path.join(self.dir, "work"), "--heartbeat", "200ms", "--job-socket", self.sock],
            stdout=log, stderr=log)
        self.addCleanup(self._stop_agent)
        if not wait_until(lambda: os.path.exists(self.sock) and self._joined(), 20):
            self.fail("the agent did not join with its job socket:\n" + self._agent_log())

    def _joined(self) -> bool:
        return "joined" in self._agent_log()

    def _agent_log(self) -> str:
        with open(os.path.join(self.dir, "agent.log")) as f:
            return f.read()

    def _stop_agent(self) -> None:
        self.agent.terminate()
        try:
            self.agent.wait(10)
        except subprocess.TimeoutExpired:
            self.agent.kill()
            self.agent.wait()

    def test_a_job_trains_through_the_socket_with_no_nats_address_it_could_reach(self):
        nowhere = f"nats://127.0.0.1:{free_port()}"
        job = shockwave.Job(job_id="py-res", model="mlp", batch_size=32, dataset_size=320, total_steps=40,
                            throughput=100.0, url=nowhere, agent_socket=self.sock)
        with job:
            steps = sum(1 for _ in job.iterate(range(40)))
            job.finish()
        self.assertEqual(steps, 40)
        rows = self.coord.status("py-res").get("jobs") or []
        self.assertEqual(len(rows), 1, rows)
        self.assertEqual(rows[0].get("state"), "completed", rows[0])
        self.assertEqual(rows[0].get("node"), "n0", rows[0])
        self.assertEqual(rows[0].get("steps_done"), 40, rows[0])

    def test_a_bad_setting_is_an_error_naming_it(self):
        with self.assertRaises(shockwave.ShockwaveError) as ctx:
            shockwave.Job(job_id="py-bad", model="mlp", batch_size=32, dataset_size=320, total_steps=40,
                          url=self.coord.url, agent_socket="")
        self.assertIn("agent_socket", str(ctx.exception))


if __name__ == "__main__":
    unittest.main()
