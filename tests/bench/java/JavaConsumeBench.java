// Bench consumer on the official rocketmq-client (DefaultMQPushConsumer) for tests/bench/compare.
//
//   JavaConsumeBench --mode consume --namesrv H:P --topic T --group G --count N [--timeout-ms MS]
//   RESULT client=java mode=consume size=.. conc=0 msgs=.. errors=.. secs=.. msgs_per_s=.. p50_us=.. p99_us=..
//
// A push consumer with the client's default tuning (consume threads, pullBatchSize,
// consumeMessageBatchMaxSize are left alone) and a MessageListenerConcurrently that only
// records each delivery and returns CONSUME_SUCCESS. The group should be new on every run;
// it starts from the first offset, so a pre-filled topic is read from its beginning.
//
// Per delivery: latency_us = (receive wall ms - born timestamp ms) * 1000. On a pre-filled
// topic this is the message's age, not a delivery latency; it means something on a topic
// filled while the consumer runs.
// secs: from the first delivery to the N-th (nanoTime); msgs_per_s = (N - 1) / secs.
// Duplicates count as deliveries. msgs is capped at N; errors = N - msgs (missing at timeout).
// Exit 0 when N arrived, 1 on timeout, 2 on bad arguments or a client error.
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyContext;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public final class JavaConsumeBench {
    /** Delivery records; slots [0, count) are filled by whichever consume thread claims them. */
    static final class Recorder implements MessageListenerConcurrently {
        final int count;
        final long[] lat;
        /** Claims a slot per delivery (may run past count with duplicates). */
        final AtomicInteger claimed = new AtomicInteger();
        /** Slots below count whose latency is written; reaching count releases `done`. */
        final AtomicInteger filled = new AtomicInteger();
        final CountDownLatch done = new CountDownLatch(1);
        volatile long firstNanos;
        volatile long lastNanos;
        volatile long endNanos;
        volatile int firstSize = -1;

        Recorder(int count) {
            this.count = count;
            this.lat = new long[count];
        }

        @Override
        public ConsumeConcurrentlyStatus consumeMessage(List<MessageExt> msgs,
                                                        ConsumeConcurrentlyContext ctx) {
            for (MessageExt m : msgs) {
                long nanos = System.nanoTime();
                long wallMs = System.currentTimeMillis();
                int i = claimed.getAndIncrement();
                if (i >= count) {
                    continue;
                }
                if (i == 0) {
                    firstNanos = nanos;
                    byte[] body = m.getBody();
                    firstSize = body == null ? 0 : body.length;
                }
                lat[i] = (wallMs - m.getBornTimestamp()) * 1000L;
                lastNanos = nanos;
                // The increment publishes lat[i] (and firstNanos for i == 0) to the thread
                // that reaches count, and through the latch to main.
                if (filled.incrementAndGet() == count) {
                    endNanos = System.nanoTime();
                    done.countDown();
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        }
    }

    public static void main(String[] args) {
        try {
            System.exit(run(args));
        } catch (Throwable e) {
            System.err.println("JavaConsumeBench: " + e);
            e.printStackTrace();
            haltLater(2);
            System.exit(2);
        }
    }

    static int run(String[] args) throws Exception {
        String namesrv = "127.0.0.1:9876";
        String topic = null;
        String group = null;
        String mode = "consume";
        long count = -1;
        long timeoutMs = 300000;
        if (args.length % 2 != 0) {
            return usage("arguments come in pairs");
        }
        for (int i = 0; i < args.length; i += 2) {
            String v = args[i + 1];
            switch (args[i]) {
                case "--mode": mode = v; break;
                case "--namesrv": namesrv = v; break;
                case "--topic": topic = v; break;
                case "--group": group = v; break;
                case "--count": count = Long.parseLong(v); break;
                case "--timeout-ms": timeoutMs = Long.parseLong(v); break;
                default: return usage("unknown argument " + args[i]);
            }
        }
        if (!mode.equals("consume")) {
            return usage("--mode must be consume");
        }
        if (topic == null || group == null) {
            return usage("--topic and --group are required");
        }
        if (count < 1 || count > Integer.MAX_VALUE - 8) {
            return usage("--count must be >= 1");
        }
        if (timeoutMs < 1) {
            return usage("--timeout-ms must be >= 1");
        }
        int n = (int) count;

        Recorder rec = new Recorder(n);
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("jcb_" + ProcessHandle.current().pid() + "_" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener(rec);

        long startNanos = System.nanoTime();
        consumer.start();
        boolean all = rec.done.await(timeoutMs, TimeUnit.MILLISECONDS);

        int got;
        long end;
        if (all) {
            got = n;
            end = rec.endNanos;
        } else {
            got = Math.min(rec.filled.get(), n);
            end = rec.lastNanos;
        }
        boolean haveFirst = rec.firstSize >= 0; // written after firstNanos
        long first = rec.firstNanos;
        // Slots below `got` may still be in flight on timeout; copy what is counted.
        long[] lat = Arrays.copyOf(rec.lat, got);
        Arrays.sort(lat);
        double secs = got > 0 && haveFirst ? (end - first) / 1e9 : 0.0;
        double rate = got > 1 && secs > 0 ? (got - 1) / secs : 0.0;
        int size = Math.max(0, rec.firstSize);

        System.out.printf(
            "RESULT client=java mode=consume size=%d conc=0 msgs=%d errors=%d secs=%.3f msgs_per_s=%.1f p50_us=%d p99_us=%d%n",
            size, got, n - got, secs, rate, pct(lat, 0.50), pct(lat, 0.99));
        System.out.flush();
        if (haveFirst) {
            System.err.printf("JavaConsumeBench: start() to first message %.3f s, total wall %.3f s%n",
                (first - startNanos) / 1e9, (System.nanoTime() - startNanos) / 1e9);
        }
        if (!all) {
            System.err.printf("JavaConsumeBench: timeout after %d ms with %d of %d messages%n",
                timeoutMs, got, n);
        }

        int code = all ? 0 : 1;
        haltLater(code);
        consumer.shutdown();
        return code;
    }

    /** Halts the JVM after 5 s in case shutdown or exit hangs. */
    static void haltLater(int code) {
        Thread t = new Thread(() -> {
            try {
                Thread.sleep(5000);
            } catch (InterruptedException ignored) {
                // halt anyway
            }
            Runtime.getRuntime().halt(code);
        }, "jcb-halt");
        t.setDaemon(true);
        t.start();
    }

    static int usage(String why) {
        System.err.println("JavaConsumeBench: " + why);
        System.err.println("usage: JavaConsumeBench --mode consume --namesrv H:P --topic T --group G"
            + " --count N [--timeout-ms MS]");
        return 2;
    }

    static long pct(long[] sorted, double p) {
        if (sorted.length == 0) {
            return 0;
        }
        int i = (int) Math.ceil(sorted.length * p) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
    }
}
