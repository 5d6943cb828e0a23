package coordinator

import (
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// The floor under a round's leases: one small message into each of n
// connections, each read by a goroutine of its own (as each job's
// connection is), first over raw loopback TCP written one after the other
// by one goroutine (what the NATS server's read loop does when it flushes
// the connections a publish reached), then through a NATS server. A
// round's lease publication cannot cost less a lease than the raw figure
// on the same machine (docs/scale.md, session 8):
//
//	go test ./coordinator -run XXX -bench Delivery -benchtime 20x

const deliveryMsgBytes = 240 // a RUN lease with one worker, as JSON

func BenchmarkDelivery_RawTCP(b *testing.B) {
	for _, n := range []int{500, 2500} {
		b.Run(fmt.Sprintf("N%d", n), func(b *testing.B) { benchRawTCP(b, n) })
	}
}

func BenchmarkDelivery_NATS(b *testing.B) {
	for _, n := range []int{500, 2500} {
		b.Run(fmt.Sprintf("N%d", n), func(b *testing.B) { benchNATS(b, n, false) })
	}
}

// BenchmarkDelivery_NATSImport publishes in one account and delivers into
// another through a stream import, as the coordinator's leases reach the
// jobs' account (localauth.go).
func BenchmarkDelivery_NATSImport(b *testing.B) {
	for _, n := range []int{500, 2500} {
		b.Run(fmt.Sprintf("N%d", n), func(b *testing.B) { benchNATS(b, n, true) })
	}
}

func benchRawTCP(b *testing.B, n int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	var got sync.WaitGroup
	writers := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range writers {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			b.Fatal(err)
		}
		writers = append(writers, s)
		go func() {
			buf := make([]byte, deliveryMsgBytes)
			for {
				if _, err := io.ReadFull(c, buf); err != nil {
					return
				}
				got.Done()
			}
		}()
	}
	msg := make([]byte, deliveryMsgBytes)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		got.Add(n)
		for _, s := range writers {
			if _, err := s.Write(msg); err != nil {
				b.Fatal(err)
			}
		}
		got.Wait()
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*n), "ns/delivery")
}

func benchNATS(b *testing.B, n int, imported bool) {
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, MaxPayload: 1 << 20}
	var subOpts, pubOpts []nats.Option
	if imported {
		coord, jobs := server.NewAccount("COORD"), server.NewAccount("JOBS")
		opts.Accounts = []*server.Account{coord, jobs}
		opts.Users = []*server.User{{Username: "c", Password: "c", Account: coord}, {Username: "j", Password: "j", Account: jobs}}
		subOpts, pubOpts = []nats.Option{nats.UserInfo("j", "j")}, []nats.Option{nats.UserInfo("c", "c")}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		b.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		b.Fatal("the NATS server did not start")
	}
	defer s.Shutdown()
	if imported {
		coord, _ := s.LookupAccount("COORD")
		jobs, _ := s.LookupAccount("JOBS")
		if err := coord.AddStreamExport("lease.*", []*server.Account{jobs}); err != nil {
			b.Fatal(err)
		}
		if err := jobs.AddStreamImport(coord, "lease.*", ""); err != nil {
			b.Fatal(err)
		}
	}
	var got sync.WaitGroup
	for i := range n {
		nc, err := nats.Connect(s.ClientURL(), subOpts...)
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		if _, err := nc.Subscribe("lease."+strconv.Itoa(i), func(*nats.Msg) { got.Done() }); err != nil {
			b.Fatal(err)
		}
		if err := nc.Flush(); err != nil {
			b.Fatal(err)
		}
	}
	pub, err := nats.Connect("", append(pubOpts, nats.InProcessServer(s))...)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	subjects := make([]string, n)
	for i := range subjects {
		subjects[i] = "lease." + strconv.Itoa(i)
	}
	msg := make([]byte, deliveryMsgBytes)
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		got.Add(n)
		for _, subj := range subjects {
			if err := pub.Publish(subj, msg); err != nil {
				b.Fatal(err)
			}
		}
		if err := pub.Flush(); err != nil {
			b.Fatal(err)
		}
		got.Wait()
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*n), "ns/delivery")
}
