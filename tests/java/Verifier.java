// Reads a topic from offset 0 of every queue with the official RocketMQ Java client and prints
// one JSON line per message, prefixed with "RMQV ", then "RMQV-END {count}".
//
// usage: Verifier <namesrv> <topic> <expectedCount> <idleTimeoutMs> [group]
// Stops when expectedCount messages were read, or when no new message arrived for idleTimeoutMs.
import java.util.ArrayList;
import java.util.Base64;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.PullStatus;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;

public final class Verifier {
    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: Verifier <namesrv> <topic> <expectedCount> <idleTimeoutMs> [group]");
            System.exit(2);
        }
        String namesrv = args[0];
        String topic = args[1];
        long expected = Long.parseLong(args[2]);
        long idleTimeout = Long.parseLong(args[3]);
        String group = args.length > 4 ? args[4] : "rmq_verifier_" + System.nanoTime();

        DefaultMQPullConsumer consumer = new DefaultMQPullConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("verifier-" + System.nanoTime());
        consumer.start();
        long count = 0;
        int exit = 0;
        try {
            Map<MessageQueue, Long> next = new HashMap<>();
            Map<MessageQueue, String> lastStatus = new java.util.TreeMap<>();
            String lastRouteError = null;
            long lastProgress = System.currentTimeMillis();
            while (count < expected || expected < 0) {
                Set<MessageQueue> queues;
                try {
                    queues = consumer.fetchSubscribeMessageQueues(topic);
                } catch (Exception e) {
                    queues = java.util.Collections.emptySet();
                    String msg = String.valueOf(e.getMessage()).split("\n")[0];
                    if (!msg.equals(lastRouteError)) {
                        System.err.println("RMQV-DEBUG route of " + topic + ": " + msg);
                        lastRouteError = msg;
                    }
                }
                List<MessageQueue> sorted = new ArrayList<>(queues);
                sorted.sort(null);
                boolean progressed = false;
                for (MessageQueue mq : sorted) {
                    long offset = next.getOrDefault(mq, 0L);
                    PullResult r;
                    try {
                        r = consumer.pull(mq, "*", offset, 32, 5000);
                    } catch (Exception e) {
                        System.err.println("RMQV-DEBUG pull " + mq + " failed: " + e);
                        continue;
                    }
                    lastStatus.put(mq, r.getPullStatus() + " next=" + r.getNextBeginOffset()
                        + " min=" + r.getMinOffset() + " max=" + r.getMaxOffset());
                    if (r.getPullStatus() == PullStatus.FOUND && r.getMsgFoundList() != null) {
                        for (MessageExt m : r.getMsgFoundList()) {
                            System.out.println("RMQV " + toJson(m));
                            count++;
                        }
                        progressed = true;
                    }
                    if (r.getNextBeginOffset() > offset) {
                        next.put(mq, r.getNextBeginOffset());
                    }
                }
                System.out.flush();
                long now = System.currentTimeMillis();
                if (progressed) {
                    lastProgress = now;
                } else if (now - lastProgress > idleTimeout) {
                    System.err.println("RMQV-DEBUG idle timeout; queues=" + sorted.size() + " last pulls=" + lastStatus);
                    break;
                } else {
                    Thread.sleep(100);
                }
            }
        } catch (Throwable t) {
            t.printStackTrace();
            exit = 1;
        } finally {
            System.out.println("RMQV-END " + count);
            System.out.flush();
            consumer.shutdown();
        }
        System.exit(exit);
    }

    static String toJson(MessageExt m) {
        String offsetMsgId = m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : m.getMsgId();
        return new Json()
            .put("topic", m.getTopic())
            .put("queueId", m.getQueueId())
            .put("queueOffset", m.getQueueOffset())
            .put("tags", m.getTags())
            .put("keys", m.getKeys())
            .putRaw("properties", Json.map(m.getProperties()))
            .put("body", m.getBody() == null ? null : Base64.getEncoder().encodeToString(m.getBody()))
            .put("msgId", m.getMsgId())
            .put("offsetMsgId", offsetMsgId)
            .put("storeHost", Json.addr(m.getStoreHost()))
            .put("bornHost", Json.addr(m.getBornHost()))
            .put("bornTimestamp", m.getBornTimestamp())
            .put("storeTimestamp", m.getStoreTimestamp())
            .put("sysFlag", m.getSysFlag())
            .put("reconsumeTimes", m.getReconsumeTimes())
            .put("flag", m.getFlag())
            .put("bodyCRC", m.getBodyCRC())
            .put("commitLogOffset", m.getCommitLogOffset())
            .put("storeSize", m.getStoreSize())
            .done();
    }
}
