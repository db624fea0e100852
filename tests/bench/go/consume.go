// Consume mode: times the push consumer of rocketmq-client-go v2 draining a topic.
//
//	gobench --mode consume --namesrv H:P --topic T --group G --count N [--timeout-ms 300000]
//	RESULT client=go mode=consume size=128 conc=0 msgs=N errors=0 secs=.. msgs_per_s=.. p50_us=.. p99_us=..
//
// The consumer keeps the client's defaults (pull batch size, consume goroutines, ...) apart from
// the group, the NameServer and ConsumeFromFirstOffset. The handler only records each message:
// latency_us = (now in ms - BornTimestamp) * 1000, so for a pre-filled topic it is the age of the
// message. secs runs from the first delivered message to the N-th; msgs_per_s = (N-1)/secs.
// Messages beyond N are acknowledged but not counted. On timeout the line reports what arrived
// (errors = N - received, secs up to the last counted message) and the exit status is 1.
package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// unset marks a latency slot that no message has filled (only visible after a timeout).
const unset = math.MinInt64

func runConsume(namesrv, topic, group string, n int64, wait time.Duration) {
	if n < 1 {
		fmt.Fprintln(os.Stderr, "gobench: --count >= 1")
		os.Exit(2)
	}
	lat := make([]int64, n)
	for i := range lat {
		lat[i] = unset
	}
	var (
		next      atomic.Int64 // slots handed out
		filled    atomic.Int64 // slots written
		lastNs    atomic.Int64 // monotonic ns since base of the latest counted message
		firstOnce sync.Once
		firstNs   int64 // monotonic ns since base of the first delivered message
		size      int
		endNs     int64 // monotonic ns since base of the N-th counted message
		done      = make(chan struct{})
	)
	base := time.Now()

	c, err := consumer.NewPushConsumer(
		consumer.WithGroupName(group),
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{namesrv})),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gobench: new push consumer:", err)
		os.Exit(1)
	}
	err = c.Subscribe(topic, consumer.MessageSelector{},
		func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
			for _, m := range msgs {
				now := time.Now()
				firstOnce.Do(func() {
					firstNs = int64(now.Sub(base))
					size = len(m.Body)
				})
				i := next.Add(1) - 1
				if i >= n {
					continue
				}
				atomic.StoreInt64(&lat[i], (now.UnixMilli()-m.BornTimestamp)*1000)
				ns := int64(now.Sub(base))
				lastNs.Store(ns)
				if filled.Add(1) == n {
					endNs = ns
					close(done)
				}
			}
			return consumer.ConsumeSuccess, nil
		})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gobench: subscribe:", err)
		os.Exit(1)
	}
	if err := c.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "gobench: start:", err)
		os.Exit(1)
	}

	status := 0
	var got []int64
	var received, end int64
	timer := time.NewTimer(wait)
	select {
	case <-done:
		timer.Stop()
		// close(done) happens after every slot was written, and after firstOnce completed.
		received = n
		end = endNs
		got = lat
	case <-timer.C:
		status = 1
		received = filled.Load()
		end = lastNs.Load()
		got = make([]int64, 0, received)
		for i := range lat {
			if v := atomic.LoadInt64(&lat[i]); v != unset {
				got = append(got, v)
			}
		}
		received = int64(len(got))
	}
	first, sz := int64(0), 0
	if received > 0 {
		// firstOnce.Do returns only after the first message's values are stored, and every
		// counted message went through it, so these reads are ordered after those writes.
		firstOnce.Do(func() {})
		first, sz = firstNs, size
	}
	secs := 0.0
	if received > 0 && end > first {
		secs = float64(end-first) / 1e9
	}
	rate := 0.0
	if secs > 0 {
		rate = float64(received-1) / secs
	}
	sort.Slice(got, func(i, j int) bool { return got[i] < got[j] })
	fmt.Printf("RESULT client=go mode=consume size=%d conc=0 msgs=%d errors=%d secs=%.3f msgs_per_s=%.1f p50_us=%d p99_us=%d\n",
		sz, received, n-received, secs, rate, pct(got, 0.50), pct(got, 0.99))

	stopped := make(chan struct{})
	go func() {
		_ = c.Shutdown()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		fmt.Fprintln(os.Stderr, "gobench: consumer shutdown still running after 5 s, exiting")
	}
	os.Exit(status)
}
