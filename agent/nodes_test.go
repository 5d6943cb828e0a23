package agent_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// TestAgents_JobsRunToCompletionAcrossNodesWithSuspensionAndMigration:
// three agents of one fake GPU each, seven submitted trainers: every job
// completes and converges; jobs were suspended and resumed from their
// checkpoint, and at least one resumed on another node than it started.
func TestAgents_JobsRunToCompletionAcrossNodesWithSuspensionAndMigration(t *testing.T) {
	// Gavel time-shares the three GPUs among the seven jobs round by round.
	// Seven, not six: six jobs can settle into three pairs that alternate
	// on their own node for the whole run (placement keeps a job where it
	// ran; one CI run of session 25 saw no job move), while seven cannot
	// split evenly over three nodes at equal shares, so some job must run
	// while its last node is taken.
	c := newCluster(t, "--agents", "--policy", "gavel")
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		c.startAgent(n, 1)
	}
	var jobs []string
	for range 7 {
		jobs = append(jobs, c.submit(nil, train(8, "30ms")...))
	}
	resumed, migrated := 0, 0
	for _, j := range jobs {
		c.waitState(j, "completed", 150*time.Second)
		out := c.finalOutput(j)
		if !strings.Contains(out, "done:") {
			t.Errorf("%s did not finish its loop:\n%s", j, out)
		}
		if strings.Contains(out, "resuming from") {
			resumed++
		}
		nodes := c.starts(j)
		for i := 1; i < len(nodes); i++ {
			if nodes[i] != nodes[i-1] {
				migrated++
				break
			}
		}
		ck := filepath.Join(c.dir, "work", j, "go-train.ckpt.json")
		if !exists(ck) {
			t.Errorf("%s: no checkpoint in its checkpoint directory", j)
		}
	}
	if resumed == 0 {
		t.Errorf("no job was suspended and resumed from its checkpoint")
	}
	if migrated == 0 {
		t.Errorf("no job resumed on another node")
	}
	t.Logf("%d of %d jobs resumed from a checkpoint, %d moved between nodes", resumed, len(jobs), migrated)
}

// TestAgents_KilledAgentsJobsAreRescheduledElsewhere: SIGKILL of the agent
// running a job makes its node leave the cluster (heartbeat timeout, a
// record in the log); the job's process dies with its agent, and the job
// resumes on another node and completes.
func TestAgents_KilledAgentsJobsAreRescheduledElsewhere(t *testing.T) {
	c := newCluster(t, "--agents")
	c.startAgent("node-a", 1)
	c.startAgent("node-b", 1)
	job := c.submit(nil, train(8, "40ms")...)
	eventually(t, 20*time.Second, "the job runs", func() bool { return strings.Contains(c.output(job), "epoch 1") })
	first := c.starts(job)[0]
	children := c.children(first)
	if len(children) == 0 {
		t.Fatalf("the agent of %s runs no process", first)
	}
	killed := time.Now()
	c.killAgent(first)
	eventually(t, 5*time.Second, "the job's process dies with its agent", func() bool {
		for _, pid := range children {
			if syscall.Kill(pid, 0) == nil {
				return false
			}
		}
		return true
	})
	eventually(t, 60*time.Second, "the job restarts on another node", func() bool {
		n := c.starts(job)
		return n[len(n)-1] != first
	})
	t.Logf("restarted %.1fs after the SIGKILL of %s's agent (agent timeout 1.5s, 1s rounds)", time.Since(killed).Seconds(), first)
	st := c.waitState(job, "completed", 90*time.Second)
	nodes := c.starts(job)
	if nodes[len(nodes)-1] == first {
		t.Errorf("the job finished on %s, whose agent was killed: starts %v", first, nodes)
	}
	if !strings.Contains(c.read("coordinator"), "no heartbeat") {
		t.Errorf("the coordinator did not log the node leaving")
	}
	if st.StepsDone == 0 {
		t.Errorf("no progress recorded: %+v", st)
	}
}

// TestAgents_RanksGetTheirDevicesAndRankVariables: a 2-rank job on one
// node of two GPUs runs one process per device; a 2-GPU gang on two
// nodes of one GPU runs one rank on each; every rank sees its own device,
// its rank, the world size and one rendezvous address.
func TestAgents_RanksGetTheirDevicesAndRankVariables(t *testing.T) {
	c := newCluster(t, "--agents")
	c.startAgent("node-a", 2)
	show := []string{"sh", "-c", `echo "rank=$RANK world=$WORLD_SIZE local=$LOCAL_RANK cuda=$CUDA_VISIBLE_DEVICES master=$MASTER_ADDR:$MASTER_PORT job=$SHOCKWAVE_JOB_ID exit=$SHOCKWAVE_EXIT_MODE"`}
	one := c.submit([]string{"--workers", "2", "--ranks-per-node", "2"}, show...)
	c.waitState(one, "completed", 30*time.Second)
	out := c.output(one)
	for _, want := range []string{"rank=0 world=2 local=0 cuda=0 master=127.0.0.1:", "rank=1 world=2 local=1 cuda=1 master=127.0.0.1:", "job=" + one + " exit=1"} {
		if !strings.Contains(out, want) {
			t.Errorf("one node, two ranks: no %q in\n%s", want, out)
		}
	}
	c.killAgent("node-a")
	c.startAgent("node-b", 1)
	c.startAgent("node-c", 1)
	two := c.submit([]string{"--workers", "2"}, append(show[:2], show[2]+"; sleep 0.5")...)
	c.waitState(two, "completed", 30*time.Second)
	out = c.output(two)
	for _, want := range []string{"rank=0 world=2 local=0 cuda=0", "rank=1 world=2 local=0 cuda=0"} {
		if !strings.Contains(out, want) {
			t.Errorf("two nodes, one rank each: no %q in\n%s", want, out)
		}
	}
	if nodes := c.starts(two); len(nodes) < 2 || nodes[0] == nodes[1] {
		t.Errorf("the 2-node gang started on %v", nodes)
	}
}

// TestDemo_NodesRunsALocalClusterToTheEnd: `shockwave demo --nodes 2x2`
// runs agents and real training processes, prints each round's placement
// per node and ends with every job completed.
func TestDemo_NodesRunsALocalClusterToTheEnd(t *testing.T) {
	cmd := exec.Command(bin.shockwave, "demo", "--nodes", "2x2", "--jobs", "4", "--timeout", "2m")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out)
	}
	s := string(out)
	if n := strings.Count(s, " completed "); n != 4 {
		t.Errorf("%d jobs completed, want 4:\n%s", n, s)
	}
	if !strings.Contains(s, "node-0[0:") || !strings.Contains(s, "node-1[0:") || !strings.Contains(s, "all jobs ended") {
		t.Errorf("no per-node placement lines:\n%s", s)
	}
}

var libOnce struct {
	sync.Once
	path string
	err  error
}

// TestAgents_PyTorchJobsSuspendAndResumeUnderTheAgent: two runs of
// examples/pytorch/train.py share one GPU under an agent: both finish, a
// restarted run resumes from its checkpoint in the job's directory, and
// every batch of theirs came through the agent's uplink.
func TestAgents_PyTorchJobsSuspendAndResumeUnderTheAgent(t *testing.T) {
	const py = "/usr/bin/python3"
	if exec.Command(py, "-c", "import torch").Run() != nil {
		t.Skip("torch is not installed for " + py + " (Debian: apt-get install python3-torch)")
	}
	lib := buildLib(t)
	repo, _ := filepath.Abs("..")
	// Rounds of 5 s: importing torch takes seconds here, and a run that
	// has not started training by the end of its lease makes no progress.
	// Gavel time-shares the GPU between the two jobs round by round.
	c := newCluster(t, "--gpus", "1", "--round", "5s", "--policy", "gavel")
	w := watchLeases(t, c)
	c.startAgent("node-0", 1)
	env := []string{"--env", "PYTHONPATH=" + filepath.Join(repo, "bindings", "python"), "--env", "SHOCKWAVE_LIBRARY=" + lib}
	// Each run trains for about 20 s, so the first cannot finish before the
	// second has imported torch and registered, even on a loaded machine
	// (with 0.01 s steps it sometimes did, and nothing was preempted).
	var jobs []string
	for range 2 {
		jobs = append(jobs, c.submit(env, py, filepath.Join(repo, "examples", "pytorch", "train.py"),
			"--epochs", "6", "--workers", "0", "--step-delay", "0.03"))
	}
	restarted := 0
	for _, j := range jobs {
		st := c.waitState(j, "completed", 150*time.Second)
		out := c.finalOutput(j)
		if st.Epoch != 6 || !strings.Contains(out, "done: 6 epochs") {
			t.Errorf("%s: epoch %d\n%s", j, st.Epoch, out)
		}
		if strings.Contains(out, "restarting from") {
			restarted++
		}
	}
	if restarted == 0 {
		t.Errorf("no run restarted from its checkpoint:\n%s\n%s", c.output(jobs[0]), c.output(jobs[1]))
	}
	// libshockwave.so under Python takes the agent's uplink as the Go SDK does
	w.mu.Lock()
	direct, carried := w.direct, w.carried
	w.mu.Unlock()
	if direct != 0 || carried == 0 {
		t.Errorf("batches: %d from the jobs' own connections, %d carried by the agent; want all carried", direct, carried)
	}
}

// buildLib builds libshockwave.so once for the Python tests.
func buildLib(t *testing.T) string {
	libOnce.Do(func() {
		libOnce.path = filepath.Join(filepath.Dir(bin.shockwave), "libshockwave.so")
		out, err := exec.Command("go", "build", "-buildmode=c-shared", "-o", libOnce.path, "../bindings").CombinedOutput()
		if err != nil {
			libOnce.err = fmt.Errorf("%v: %s", err, out)
		}
	})
	if libOnce.err != nil {
		t.Fatal(libOnce.err)
	}
	return libOnce.path
}

// TestAgents_DDPJobRunsOneRankPerDeviceAndResumesTogether: the 2-rank
// torch.distributed (gloo) example under agents, sharing the cluster with
// a 1-GPU trainer that makes it stop and restart from its checkpoint: once
// on one node of two GPUs (one rank per device) and once across two nodes
// of one GPU (one rank each, rendezvous at rank 0's node). Both ranks
// finish with the same weights.
func TestAgents_DDPJobRunsOneRankPerDeviceAndResumesTogether(t *testing.T) {
	const py = "/usr/bin/python3"
	repo, _ := filepath.Abs("..")
	script := filepath.Join(repo, "examples", "pytorch", "train_ddp.py")
	if !exists(script) {
		t.Skip("examples/pytorch/train_ddp.py is not in this tree")
	}
	if exec.Command(py, "-c", "import torch").Run() != nil {
		t.Skip("torch is not installed for " + py + " (Debian: apt-get install python3-torch)")
	}
	lib := buildLib(t)
	for _, layout := range []struct {
		name  string
		nodes map[string]int
	}{{"one node", map[string]int{"node-a": 2}}, {"two nodes", map[string]int{"node-a": 1, "node-b": 1}}} {
		t.Run(layout.name, func(t *testing.T) {
			// Gavel time-shares the devices with the 1-GPU trainer, so the
			// DDP job is suspended and restarted (EXIT mode) on its grants.
			c := newCluster(t, "--agents", "--round", "5s", "--policy", "gavel")
			for n, g := range layout.nodes {
				c.startAgent(n, g)
			}
			env := []string{"--env", "PYTHONPATH=" + filepath.Join(repo, "bindings", "python"), "--env", "SHOCKWAVE_LIBRARY=" + lib}
			ddp := c.submit(append(env, "--workers", "2", "--ranks-per-node", "2"), py, script, "--epochs", "6",
				"--exit-mode", "--step-delay", "0.01", "--checkpoint", filepath.Join(c.dir, "ddp.pt"))
			other := c.submit(nil, train(12, "60ms")...)
			c.waitState(ddp, "completed", 240*time.Second)
			c.waitState(other, "completed", 60*time.Second)
			out := c.output(ddp)
			finals := map[string]bool{}
			for _, l := range strings.Split(out, "\n") {
				if f := strings.Fields(l); len(f) == 3 && f[0] == "final" {
					finals[f[2]] = true
				}
			}
			if strings.Count(out, "\nfinal ") != 2 || len(finals) != 1 {
				t.Errorf("want both ranks to print one final digest:\n%s", out)
			}
			starts := c.starts(ddp)
			if len(starts) <= len(layout.nodes) {
				t.Errorf("the DDP job never restarted: starts on %v", starts)
			}
			if !strings.Contains(out, "restarting from") {
				t.Errorf("no rank restarted from the checkpoint:\n%s", out)
			}
			// Rank 0 (libshockwave under Python) read the SUSPEND its agent
			// relays; the coordinator sends a relayed job none over NATS.
			if !strings.Contains(out, "not granted on node") {
				t.Errorf("no rank was suspended by the agent's relayed SUSPEND:\n%s", out)
			}
			t.Logf("%d starts of the DDP job on %v", len(starts), starts)
		})
	}
}
