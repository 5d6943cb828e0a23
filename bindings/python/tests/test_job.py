"""shockwave.Job against a real coordinator: register, iterate, hooks, modes."""

from __future__ import annotations

import threading
import time
import unittest

from tests.harness import Coordinator, wait_until

import shockwave


class CoordinatorTest(unittest.TestCase):
    """Runs one coordinator for the test class."""

    gpus = 1
    policy = "shockwave"
    per_test = False  # a fresh coordinator for every test
    coord: Coordinator

    @classmethod
    def setUpClass(cls) -> None:
        if not cls.per_test:
            cls.coord = Coordinator(gpus=cls.gpus, round_s=1.0, policy=cls.policy)
            cls.coord.start()

    @classmethod
    def tearDownClass(cls) -> None:
        if not cls.per_test:
            cls.coord.stop()

    def setUp(self) -> None:
        if self.per_test:
            self.coord = Coordinator(gpus=self.gpus, round_s=1.0, policy=self.policy)
            self.coord.start()
            self.addCleanup(self.coord.stop)

    def job(self, job_id: str, **kw) -> shockwave.Job:
        args = dict(model="mlp", batch_size=32, dataset_size=3200, total_steps=100000, url=self.coord.url)
        args.update(kw)
        return shockwave.Job(job_id=job_id, **args)

    def status_of(self, job_id: str) -> dict:
        jobs = self.coord.status(job_id).get("jobs") or []
        self.assertEqual(len(jobs), 1, f"status of {job_id}: {jobs}")
        return jobs[0]


class TestRegisterIterate(CoordinatorTest):
    def test_iterate_yields_every_batch_in_order_and_reports_progress(self):
        with self.job("iter-1") as job:
            got = []
            for b in job.iterate(range(60)):
                self.assertTrue(job.running, "a batch was yielded without a RUN lease")
                got.append(b)
                time.sleep(0.002)
            self.assertEqual(got, list(range(60)))
            self.assertEqual(job.steps, 60)
            state = job.state
            self.assertEqual((state["steps_done"], state["epoch"]), (60, 1))
        st = self.status_of("iter-1")
        self.assertEqual(st["state"], "completed")
        self.assertEqual((st["steps_done"], st["epoch"]), (60, 1))
        self.assertGreater(st.get("throughput", 0), 0, "no throughput measured")

    def test_leaving_with_an_exception_does_not_finish_the_job(self):
        with self.assertRaises(KeyError):
            with self.job("iter-crash") as job:
                for _ in job.iterate(range(5)):
                    pass
                raise KeyError("boom")
        self.assertNotEqual(self.status_of("iter-crash")["state"], "completed")

    def test_set_batch_size_reaches_the_coordinator(self):
        with self.job("bs-1") as job:
            for _ in job.iterate(range(10)):
                pass
            job.set_batch_size(128)
            self.assertEqual(job.batch_size, 128)
            for _ in job.iterate(range(10)):
                pass
            self.assertEqual(job.state["batch_size"], 128)
        self.assertEqual(self.status_of("bs-1")["batch_size"], 128)

    def test_lease_and_state_are_dicts(self):
        with self.job("lease-1") as job:
            job.wait_for_lease()
            lease = job.lease
            self.assertEqual((lease["job"], lease["action"]), ("lease-1", "RUN"))
            self.assertIn("steps_done", job.state)
            self.assertEqual(job.id, "lease-1")
            self.assertIn("lease-1", repr(job))

    def test_epoch_false_counts_no_epoch(self):
        with self.job("noepoch-1") as job:
            for _ in job.iterate(range(3), epoch=False):
                pass
            self.assertEqual(job.state["epoch"], 0)
            job.end_epoch()
            self.assertEqual(job.state["epoch"], 1)

    def test_breaking_out_counts_the_steps_done(self):
        with self.job("break-1") as job:
            for i in job.iterate(range(100)):
                if i == 9:
                    break
            self.assertEqual(job.steps, 9)  # the 10th batch was not finished
            self.assertEqual(job.state["epoch"], 0)

    def test_calls_after_close_raise_job_closed(self):
        job = self.job("closed-1")
        job.close()
        job.close()  # idempotent
        with self.assertRaises(shockwave.JobClosed):
            job.set_batch_size(8)
        with self.assertRaises(shockwave.JobClosed):
            list(job.iterate(range(2)))


class TestSuspendResume(CoordinatorTest):
    # Gavel's max-min fairness alternates two equal jobs on one GPU round by
    # round. A fresh coordinator per test: under gavel, jobs registered after
    # another job completed get no lease (a policy bug, reported).
    policy = "gavel"
    per_test = True

    def test_two_jobs_share_one_gpu_with_hooks(self):
        results, errors = {}, []

        def train(job: shockwave.Job, log: list, suspended: list) -> None:
            try:
                with job:
                    got = []
                    for b in job.iterate(range(700)):
                        if suspended[0]:
                            errors.append(f"{job.id}: batch {b} yielded while suspended")
                        got.append(b)
                        time.sleep(0.004)
                    if got != list(range(700)):
                        errors.append(f"{job.id}: batches lost or repeated across suspensions")
                results[job.id] = log
            except Exception as e:  # reported below
                errors.append(f"{job.id}: {e!r}")

        def hooks(log: list, suspended: list):
            def on_suspend():
                log.append("suspend")
                suspended[0] = True

            def on_resume():
                log.append("resume")
                suspended[0] = False

            return dict(on_suspend=on_suspend, on_resume=on_resume)

        # Both jobs register before the first round (Gavel allocates at
        # resets only), then train in parallel.
        threads = []
        for name in ("share-a", "share-b"):
            log, suspended = [], [False]
            job = self.job(name, **hooks(log, suspended))
            threads.append(threading.Thread(target=train, args=(job, log, suspended)))
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        if any(t.is_alive() for t in threads):
            print("\n--- coordinator log (tail) ---\n" + self.coord.tail(30))
        self.assertFalse(any(t.is_alive() for t in threads), "a job hung")
        self.assertEqual(errors, [])
        logs = list(results.values())
        self.assertTrue(any(logs), f"no suspension happened: {results}")
        for log in logs:
            # Hooks alternate, starting with a suspension and ending resumed.
            self.assertEqual(log, ["suspend", "resume"] * (len(log) // 2), log)

    def test_exit_mode_raises_preempted_after_the_hook_and_restart_resumes(self):
        calls, outcome, saved = [], {}, {}

        def checkpoint(holder: list):
            def on_suspend():
                calls.append(holder[0].id)
                saved[holder[0].id] = holder[0].state  # the checkpoint

            return on_suspend

        def train(job: shockwave.Job) -> None:
            try:
                with job:
                    for _ in job.iterate(range(100000)):
                        time.sleep(0.002)
                        if job.steps >= 1500:
                            break
                    outcome[job.id] = ("done",)
            except shockwave.Preempted as e:
                outcome[job.id] = ("preempted", str(e))
            except Exception as e:
                outcome[job.id] = ("error", repr(e))

        threads = []
        for name in ("exit-a", "exit-b"):
            holder: list = []
            holder.append(self.job(name, exit_mode=True, on_suspend=checkpoint(holder)))
            threads.append(threading.Thread(target=train, args=(holder[0],)))
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        preempted = [n for n, o in outcome.items() if o[0] == "preempted"]
        self.assertTrue(preempted, f"no job was preempted: {outcome}")
        name = preempted[0]
        self.assertIn(name, calls, "on_suspend did not run before Preempted")
        self.assertIn("preempted", outcome[name][1])
        checkpoint = saved[name]
        self.assertGreater(checkpoint["steps_done"], 0)
        # The restarted process registers the same job with its checkpoint.
        with self.job(name, exit_mode=True, resume=checkpoint) as job:
            self.assertEqual(job.state["steps_done"], checkpoint["steps_done"])
            for _ in job.iterate(range(5)):
                pass
            self.assertEqual(job.state["steps_done"], checkpoint["steps_done"] + 5)


class TestJobEnded(CoordinatorTest):
    def test_the_run_time_limit_ends_the_job(self):
        # isolated_seconds=1 sets a run-time limit of 1.5 s (the default factor).
        with self.job("ended-1", isolated_seconds=1.0) as job:
            start = time.monotonic()
            with self.assertRaises(shockwave.JobEnded) as cm:
                for _ in job.iterate(range(10**7)):
                    time.sleep(0.001)
                    self.assertLess(time.monotonic() - start, 30, "the job was never ended")
            self.assertIn("ended-1", str(cm.exception))
            self.assertIn("run time", str(cm.exception))
            with self.assertRaises(shockwave.JobEnded):
                job.wait_for_lease()


class TestThreads(CoordinatorTest):
    def test_concurrent_calls_on_one_job(self):
        errors = []
        with self.job("threads-1") as job:
            job.wait_for_lease()
            stop = threading.Event()

            def hammer(i: int) -> None:
                n = 0
                try:
                    while not stop.is_set():
                        job.set_batch_size(16 * (1 + (i + n) % 4))
                        job.lease
                        job.state
                        n += 1
                except Exception as e:
                    errors.append(repr(e))

            def iterate() -> None:
                try:
                    for _ in job.iterate(range(300), epoch=False):
                        time.sleep(0.001)
                except Exception as e:
                    errors.append(repr(e))

            threads = [threading.Thread(target=hammer, args=(i,)) for i in range(4)]
            threads += [threading.Thread(target=iterate) for _ in range(2)]
            for t in threads:
                t.start()
            for t in threads[4:]:
                t.join(30)
            stop.set()
            for t in threads[:4]:
                t.join(30)
            self.assertFalse(any(t.is_alive() for t in threads), "a thread hung")
            self.assertEqual(errors, [])
            job.set_batch_size(48)
            self.assertEqual(job.batch_size, 48)
            self.assertEqual(job.state["batch_size"], 48)
            # Two iterations of 300 steps each; concurrent increments may race
            # (documented), but not by much.
            self.assertTrue(wait_until(lambda: job.state["steps_done"] > 0, 5))
            self.assertGreaterEqual(job.steps, 550)


if __name__ == "__main__":
    unittest.main()
