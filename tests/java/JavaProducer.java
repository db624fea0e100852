// Sends messages with the official RocketMQ Java client; prints one "RMQP {json}" line per send
// result and a final "RMQP-END {sent} {failed}" line.
//
// usage: JavaProducer --namesrv H:P --topic T [--count N] [--size S | --body TEXT] [--tags T]
//                     [--keys K] [--prop k=v]... [--mode sync|async|oneway|transaction] [--group G]
//                     [--compress-over BYTES] [--compress-type ZLIB|LZ4|ZSTD] [--timeout MS]
//                     [--delay-ms MS] [--trace true]
// --trace true turns message trace on (DefaultMQProducer(group, true, null): Pub records to
// RMQ_SYS_TRACE_TOPIC, sent before the producer's shutdown returns).
// --delay-ms makes each message a 5.x timer message (TIMER_DELAY_MS, as setDelayTimeMs writes it;
// through MessageAccessor so that the tool also builds against the 4.9 client).
// --mode transaction sends each message with a TransactionMQProducer whose listener commits
// (its local transaction and its check-back both answer COMMIT_MESSAGE).
// In --body and --keys, "{i}" is replaced by the message index.  Without --body, message i has
// --size bytes: (i + j) % 26 + 'a' for j = 0..size.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;

public final class JavaProducer {
    public static void main(String[] args) throws Exception {
        String namesrv = null;
        String topic = null;
        int count = 1;
        int size = 16;
        String body = null;
        String tags = null;
        String keys = null;
        String mode = "sync";
        String group = "rmq_java_producer";
        int compressOver = -1;
        String compressType = null;
        int timeout = 10000;
        Map<String, String> props = new LinkedHashMap<>();
        String delayMs = null;
        boolean trace = false;
        String namespace = null;
        for (int i = 0; i < args.length; i++) {
            String a = args[i];
            String v = i + 1 < args.length ? args[i + 1] : null;
            if (v == null) {
                usage("missing value for " + a);
            }
            i++;
            switch (a) {
                case "--namesrv": namesrv = v; break;
                case "--topic": topic = v; break;
                case "--count": count = Integer.parseInt(v); break;
                case "--size": size = Integer.parseInt(v); break;
                case "--body": body = v; break;
                case "--tags": tags = v; break;
                case "--keys": keys = v; break;
                case "--mode": mode = v; break;
                case "--group": group = v; break;
                case "--compress-over": compressOver = Integer.parseInt(v); break;
                case "--compress-type": compressType = v; break;
                case "--timeout": timeout = Integer.parseInt(v); break;
                case "--delay-ms": delayMs = v; break;
                case "--trace": trace = Boolean.parseBoolean(v); break;
                case "--namespace": namespace = v; break;
                case "--prop": {
                    int eq = v.indexOf('=');
                    if (eq <= 0) {
                        usage("--prop wants k=v");
                    }
                    props.put(v.substring(0, eq), v.substring(eq + 1));
                    break;
                }
                default: usage("unknown option " + a);
            }
        }
        if (namesrv == null || topic == null) {
            usage("--namesrv and --topic are required");
        }

        if (compressType != null) {
            // Read when the producer is built (MixAll.MESSAGE_COMPRESS_TYPE), on 4.9.4+ and 5.x.
            System.setProperty("rocketmq.message.compressType", compressType);
        }
        DefaultMQProducer producer;
        if (mode.equals("transaction")) {
            TransactionMQProducer tx = new TransactionMQProducer(group);
            tx.setTransactionListener(new TransactionListener() {
                @Override
                public LocalTransactionState executeLocalTransaction(Message m, Object arg) {
                    return LocalTransactionState.COMMIT_MESSAGE;
                }

                @Override
                public LocalTransactionState checkLocalTransaction(MessageExt m) {
                    return LocalTransactionState.COMMIT_MESSAGE;
                }
            });
            producer = tx;
        } else {
            producer = new DefaultMQProducer(group, trace, null);
        }
        producer.setNamesrvAddr(namesrv);
        if (namespace != null) {
            producer.setNamespace(namespace);
        }
        producer.setInstanceName("java-producer-" + System.nanoTime());
        producer.setSendMsgTimeout(timeout);
        producer.setVipChannelEnabled(false);
        if (compressOver >= 0) {
            producer.setCompressMsgBodyOverHowmuch(compressOver);
        }
        producer.start();

        AtomicLong sent = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        CountDownLatch done = new CountDownLatch(mode.equals("async") ? count : 0);
        int exit = 0;
        try {
            for (int i = 0; i < count; i++) {
                final int idx = i;
                Message msg = new Message(topic, makeBody(body, size, i));
                if (tags != null) {
                    msg.setTags(tags.replace("{i}", Integer.toString(i)));
                }
                if (keys != null) {
                    msg.setKeys(keys.replace("{i}", Integer.toString(i)));
                }
                for (Map.Entry<String, String> e : props.entrySet()) {
                    msg.putUserProperty(e.getKey(), e.getValue().replace("{i}", Integer.toString(i)));
                }
                if (delayMs != null) {
                    MessageAccessor.putProperty(msg, "TIMER_DELAY_MS", delayMs);
                }
                switch (mode) {
                    case "sync":
                        try {
                            print(idx, producer.send(msg));
                            sent.incrementAndGet();
                        } catch (Exception e) {
                            failed.incrementAndGet();
                            printErr(idx, e);
                        }
                        break;
                    case "transaction":
                        try {
                            print(idx, producer.sendMessageInTransaction(msg, null));
                            sent.incrementAndGet();
                        } catch (Exception e) {
                            failed.incrementAndGet();
                            printErr(idx, e);
                        }
                        break;
                    case "oneway":
                        producer.sendOneway(msg);
                        sent.incrementAndGet();
                        System.out.println("RMQP " + new Json().put("i", idx).put("status", "ONEWAY").done());
                        break;
                    case "async":
                        producer.send(msg, new SendCallback() {
                            @Override
                            public void onSuccess(SendResult r) {
                                print(idx, r);
                                sent.incrementAndGet();
                                done.countDown();
                            }

                            @Override
                            public void onException(Throwable e) {
                                printErr(idx, e);
                                failed.incrementAndGet();
                                done.countDown();
                            }
                        });
                        break;
                    default:
                        usage("unknown mode " + mode);
                }
            }
            done.await();
        } catch (Throwable t) {
            t.printStackTrace();
            exit = 1;
        } finally {
            synchronized (System.out) {
                System.out.println("RMQP-END " + sent.get() + " " + failed.get());
                System.out.flush();
            }
            producer.shutdown();
        }
        System.exit(exit != 0 || failed.get() > 0 ? 1 : 0);
    }

    static byte[] makeBody(String body, int size, int i) {
        if (body != null) {
            return body.replace("{i}", Integer.toString(i)).getBytes(StandardCharsets.UTF_8);
        }
        byte[] b = new byte[size];
        for (int j = 0; j < size; j++) {
            b[j] = (byte) ('a' + (i + j) % 26);
        }
        return b;
    }

    static void print(int i, SendResult r) {
        String line = new Json()
            .put("i", i)
            .put("status", r.getSendStatus().name())
            .put("msgId", r.getMsgId())
            .put("offsetMsgId", r.getOffsetMsgId())
            .put("brokerName", r.getMessageQueue().getBrokerName())
            .put("queueId", r.getMessageQueue().getQueueId())
            .put("queueOffset", r.getQueueOffset())
            .done();
        synchronized (System.out) {
            System.out.println("RMQP " + line);
        }
    }

    static void printErr(int i, Throwable e) {
        // The whole cause chain: "Send [3] times, still failed" alone hides the broker's answer.
        StringBuilder why = new StringBuilder(e.toString());
        for (Throwable c = e.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
            why.append(" <- caused by ").append(c);
        }
        String line =
            new Json().put("i", i).put("status", "ERROR").put("error", why.toString()).done();
        synchronized (System.out) {
            System.out.println("RMQP " + line);
        }
    }

    static void usage(String why) {
        System.err.println("JavaProducer: " + why);
        System.exit(2);
    }
}
