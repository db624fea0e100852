// Bench producer on apache/rocketmq-client-go v2 for tests/bench/compare.
//
// Same command line and result line as the other bench clients:
//
//	gobench --namesrv 127.0.0.1:9876 --topic T --mode sync|async --size 1024 --conc 64 \
//	    --count 20000 [--warmup 2000] [--group G] [--timeout-ms 3000]
//	RESULT client=go mode=async size=1024 conc=64 msgs=20000 errors=0 secs=.. msgs_per_s=.. p50_us=.. p99_us=..
//
//	gobench --mode consume --namesrv H:P --topic T --group G --count N [--timeout-ms 300000]
//	(push consumer, see consume.go)
//
// sync: conc goroutines, each calling SendSync in a loop.
// async: one loop calling SendAsync with at most conc sends in flight (a buffered channel used
// as a semaphore, released by the callback).
// Body: size bytes of 'x', as in `rmq bench`. Compression is left at the client's default (zlib
// level 5 for bodies of 4096 bytes or more), as in every bench client.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/apache/rocketmq-client-go/v2/rlog"
)

type stats struct {
	mu     sync.Mutex
	lat    []int64 // microseconds
	errors atomic.Int64
}

func (s *stats) add(us int64, err bool) {
	s.mu.Lock()
	s.lat = append(s.lat, us)
	s.mu.Unlock()
	if err {
		s.errors.Add(1)
	}
}

func pct(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(float64(len(sorted))*p)) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

func main() {
	namesrv := flag.String("namesrv", "127.0.0.1:9876", "NameServer address")
	topic := flag.String("topic", "BenchTopic", "topic")
	group := flag.String("group", "bench_go", "producer group")
	mode := flag.String("mode", "async", "sync, async or consume")
	size := flag.Int("size", 1024, "body size in bytes")
	conc := flag.Int("conc", 1, "sends in flight")
	count := flag.Int64("count", 10000, "measured messages")
	warmup := flag.Int64("warmup", 0, "unmeasured messages sent first")
	timeoutMs := flag.Int("timeout-ms", 3000, "send timeout (consume: overall wait, default 300000)")
	flag.Parse()
	if *mode == "consume" {
		rlog.SetLogLevel("error")
		wait := 300000
		flag.Visit(func(f *flag.Flag) {
			if f.Name == "timeout-ms" {
				wait = *timeoutMs
			}
		})
		runConsume(*namesrv, *topic, *group, *count, time.Duration(wait)*time.Millisecond)
	}
	if *conc < 1 || (*mode != "sync" && *mode != "async") {
		fmt.Fprintln(os.Stderr, "gobench: --conc >= 1 and --mode sync|async|consume")
		os.Exit(2)
	}
	rlog.SetLogLevel("error")

	p, err := rocketmq.NewProducer(
		producer.WithNameServer([]string{*namesrv}),
		producer.WithGroupName(*group),
		producer.WithRetry(2),
		producer.WithSendMsgTimeout(time.Duration(*timeoutMs)*time.Millisecond),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gobench: new producer:", err)
		os.Exit(1)
	}
	if err := p.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "gobench: start:", err)
		os.Exit(1)
	}
	body := make([]byte, *size)
	for i := range body {
		body[i] = 'x'
	}

	run := func(n int64) *stats {
		st := &stats{lat: make([]int64, 0, n)}
		if *mode == "sync" {
			var next atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < *conc; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for next.Add(1) <= n {
						msg := primitive.NewMessage(*topic, body)
						t0 := time.Now()
						res, err := p.SendSync(context.Background(), msg)
						st.add(time.Since(t0).Microseconds(), err != nil || res.Status != primitive.SendOK)
					}
				}()
			}
			wg.Wait()
			return st
		}
		sem := make(chan struct{}, *conc)
		var wg sync.WaitGroup
		for i := int64(0); i < n; i++ {
			sem <- struct{}{}
			wg.Add(1)
			msg := primitive.NewMessage(*topic, body)
			t0 := time.Now()
			err := p.SendAsync(context.Background(), func(_ context.Context, res *primitive.SendResult, err error) {
				st.add(time.Since(t0).Microseconds(), err != nil || res == nil || res.Status != primitive.SendOK)
				<-sem
				wg.Done()
			}, msg)
			if err != nil {
				st.add(time.Since(t0).Microseconds(), true)
				<-sem
				wg.Done()
			}
		}
		wg.Wait()
		return st
	}

	if *warmup > 0 {
		run(*warmup)
	}
	t0 := time.Now()
	st := run(*count)
	secs := time.Since(t0).Seconds()
	sort.Slice(st.lat, func(i, j int) bool { return st.lat[i] < st.lat[j] })
	fmt.Printf("RESULT client=go mode=%s size=%d conc=%d msgs=%d errors=%d secs=%.3f msgs_per_s=%.0f p50_us=%d p99_us=%d\n",
		*mode, *size, *conc, *count, st.errors.Load(), secs, float64(*count)/secs, pct(st.lat, 0.50), pct(st.lat, 0.99))
	_ = p.Shutdown()
}
