module github.com/shockwave-sched/shockwave

go 1.26
