// Bench producer on the official rocketmq-client (DefaultMQProducer) for tests/bench/compare.
//
// Same command line and result line as the other bench clients:
//
//   JavaBench --namesrv H:P --topic T --mode sync|async|transaction|request --size N --conc N --count N
//             [--warmup N] [--group G] [--timeout-ms MS] [--latency-fault true|false]
//   RESULT client=java mode=.. size=.. conc=.. msgs=.. errors=.. secs=.. msgs_per_s=.. p50_us=.. p99_us=..
//
// sync: conc threads, each calling send(msg, timeout) in a loop.
// transaction: conc threads, each calling a TransactionMQProducer's sendMessageInTransaction in a
// loop (its listener commits at once; an error is anything but SEND_OK and COMMIT_MESSAGE).
// async: one thread calling send(msg, callback, timeout) with at most conc sends in flight
// (a Semaphore released by the callback).
// Body: `size` bytes of 'x', as in `rmq bench`. Compression is left at the client's default
// (zlib level 5 for bodies of 4096 bytes or more), as in every bench client.
import java.util.Arrays;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

public final class JavaBench {
    /** Latencies in microseconds, appended concurrently. */
    static final class Stats {
        final long[] lat;
        final AtomicLong n = new AtomicLong();
        final AtomicLong errors = new AtomicLong();

        Stats(long capacity) {
            lat = new long[(int) capacity];
        }

        void add(long us, boolean error) {
            long i = n.getAndIncrement();
            if (i < lat.length) {
                lat[(int) i] = us;
            }
            if (error) {
                errors.incrementAndGet();
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String namesrv = "127.0.0.1:9876";
        String topic = "BenchTopic";
        String group = "bench_java";
        String mode = "async";
        int size = 1024;
        int conc = 1;
        long count = 10000;
        long warmup = 0;
        int timeout = 3000;
        boolean latencyFault = true;
        for (int i = 0; i + 1 < args.length; i += 2) {
            String v = args[i + 1];
            switch (args[i]) {
                case "--namesrv": namesrv = v; break;
                case "--topic": topic = v; break;
                case "--group": group = v; break;
                case "--mode": mode = v; break;
                case "--size": size = Integer.parseInt(v); break;
                case "--conc": conc = Integer.parseInt(v); break;
                case "--count": count = Long.parseLong(v); break;
                case "--warmup": warmup = Long.parseLong(v); break;
                case "--timeout-ms": timeout = Integer.parseInt(v); break;
                case "--latency-fault": latencyFault = Boolean.parseBoolean(v); break;
                default:
                    System.err.println("JavaBench: unknown argument " + args[i]);
                    System.exit(2);
            }
        }
        boolean tx = mode.equals("transaction");
        boolean request = mode.equals("request");
        if (args.length % 2 != 0 || conc < 1
            || !(mode.equals("sync") || mode.equals("async") || tx || request)) {
            System.err.println("JavaBench: bad arguments (--conc >= 1, --mode sync|async|transaction|request)");
            System.exit(2);
        }

        DefaultMQProducer producer;
        if (tx) {
            TransactionMQProducer t = new TransactionMQProducer(group);
            t.setTransactionListener(new TransactionListener() {
                @Override
                public LocalTransactionState executeLocalTransaction(Message m, Object arg) {
                    return LocalTransactionState.COMMIT_MESSAGE;
                }

                @Override
                public LocalTransactionState checkLocalTransaction(MessageExt m) {
                    return LocalTransactionState.COMMIT_MESSAGE;
                }
            });
            producer = t;
        } else {
            producer = new DefaultMQProducer(group);
        }
        producer.setNamesrvAddr(namesrv);
        producer.setSendMsgTimeout(timeout);
        producer.setSendLatencyFaultEnable(latencyFault);
        producer.start();
        DefaultMQPushConsumer replier = null;
        if (request) {
            // The replier, as rmq bench runs it: a consumer of the topic from its last offset
            // that echoes each request's body through the same producer.
            replier = new DefaultMQPushConsumer("java-bench-replier");
            replier.setNamesrvAddr(namesrv);
            replier.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_LAST_OFFSET);
            replier.subscribe(topic, "*");
            final DefaultMQProducer p = producer;
            replier.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
                for (MessageExt m : msgs) {
                    try {
                        p.send(MessageUtil.createReplyMessage(m, m.getBody()), 3000);
                    } catch (Exception e) {
                        // The requester times out and counts it.
                    }
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            replier.start();
        }

        byte[] body = new byte[size];
        Arrays.fill(body, (byte) 'x');

        if (warmup > 0) {
            run(producer, topic, body, mode, conc, warmup, timeout);
        }
        long t0 = System.nanoTime();
        Stats st = run(producer, topic, body, mode, conc, count, timeout);
        double secs = (System.nanoTime() - t0) / 1e9;
        int n = (int) Math.min(st.n.get(), st.lat.length);
        long[] lat = Arrays.copyOf(st.lat, n);
        Arrays.sort(lat);
        System.out.printf(
            "RESULT client=java mode=%s size=%d conc=%d msgs=%d errors=%d secs=%.3f msgs_per_s=%.0f p50_us=%d p99_us=%d%n",
            mode, size, conc, count, st.errors.get(), secs, count / secs, pct(lat, 0.50), pct(lat, 0.99));
        System.out.flush();
        if (replier != null) {
            replier.shutdown();
        }
        producer.shutdown();
        System.exit(0);
    }

    static long pct(long[] sorted, double p) {
        if (sorted.length == 0) {
            return 0;
        }
        int i = (int) Math.ceil(sorted.length * p) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
    }

    static Stats run(DefaultMQProducer producer, String topic, byte[] body, String mode, int conc,
                     long n, int timeout) throws Exception {
        Stats st = new Stats(n);
        if (!mode.equals("async")) {
            boolean tx = mode.equals("transaction");
            boolean request = mode.equals("request");
            AtomicLong next = new AtomicLong();
            Thread[] threads = new Thread[conc];
            for (int w = 0; w < conc; w++) {
                threads[w] = new Thread(() -> {
                    while (next.incrementAndGet() <= n) {
                        long t = System.nanoTime();
                        boolean err;
                        try {
                            if (request) {
                                // The callback form: 5.3.3's blocking request(msg, timeout)
                                // returns at the send's acknowledgement (apache/rocketmq #8272).
                                CompletableFuture<Message> done = new CompletableFuture<>();
                                producer.request(new Message(topic, body), new RequestCallback() {
                                    @Override
                                    public void onSuccess(Message m) {
                                        if (m != null) {
                                            done.complete(m);
                                        }
                                    }

                                    @Override
                                    public void onException(Throwable e) {
                                        done.completeExceptionally(e);
                                    }
                                }, 3000);
                                err = done.get(5000, TimeUnit.MILLISECONDS) == null;
                            } else if (tx) {
                                TransactionSendResult r =
                                    producer.sendMessageInTransaction(new Message(topic, body), null);
                                err = r.getSendStatus() != SendStatus.SEND_OK
                                    || r.getLocalTransactionState() != LocalTransactionState.COMMIT_MESSAGE;
                            } else {
                                SendResult r = producer.send(new Message(topic, body), timeout);
                                err = r.getSendStatus() != SendStatus.SEND_OK;
                            }
                        } catch (Exception e) {
                            err = true;
                        }
                        st.add((System.nanoTime() - t) / 1000, err);
                    }
                });
                threads[w].start();
            }
            for (Thread t : threads) {
                t.join();
            }
            return st;
        }
        Semaphore inFlight = new Semaphore(conc);
        for (long i = 0; i < n; i++) {
            inFlight.acquire();
            long t = System.nanoTime();
            try {
                producer.send(new Message(topic, body), new SendCallback() {
                    @Override
                    public void onSuccess(SendResult r) {
                        st.add((System.nanoTime() - t) / 1000, r.getSendStatus() != SendStatus.SEND_OK);
                        inFlight.release();
                    }

                    @Override
                    public void onException(Throwable e) {
                        st.add((System.nanoTime() - t) / 1000, true);
                        inFlight.release();
                    }
                }, timeout);
            } catch (Exception e) {
                st.add((System.nanoTime() - t) / 1000, true);
                inFlight.release();
            }
        }
        if (!inFlight.tryAcquire(conc, 3L * timeout, TimeUnit.MILLISECONDS)) {
            System.err.println("JavaBench: callbacks missing after timeout");
        }
        return st;
    }
}
