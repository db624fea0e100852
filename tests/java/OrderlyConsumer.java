// An orderly push consumer on the official RocketMQ Java client (MessageListenerOrderly) that
// records when it processed each message; after the run it prints one line per message,
// "RMQO <queueId> <queueOffset> <body> <startMs> <endMs>", then "RMQO-END <count>".
//
// usage: OrderlyConsumer <namesrv> <topic> <group> <runMillis> <processMillis>
// Consumes from the first offset for runMillis, each message taking processMillis, then shuts
// down (committing and unlocking its queues).
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public final class OrderlyConsumer {
    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: OrderlyConsumer <namesrv> <topic> <group> <runMillis> <processMillis>");
            System.exit(2);
        }
        long runMillis = Long.parseLong(args[3]);
        long processMillis = Long.parseLong(args[4]);
        List<String> records = new ArrayList<>();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args[2]);
        consumer.setNamesrvAddr(args[0]);
        consumer.setInstanceName("orderly-" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(args[1], "*");
        consumer.registerMessageListener((MessageListenerOrderly) (msgs, context) -> {
            for (MessageExt m : msgs) {
                long start = System.currentTimeMillis();
                try {
                    Thread.sleep(processMillis);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                long end = System.currentTimeMillis();
                String body = new String(m.getBody(), StandardCharsets.UTF_8);
                synchronized (records) {
                    records.add("RMQO " + m.getQueueId() + " " + m.getQueueOffset() + " " + body
                        + " " + start + " " + end);
                }
            }
            return ConsumeOrderlyStatus.SUCCESS;
        });
        consumer.start();
        Thread.sleep(runMillis);
        consumer.shutdown();
        synchronized (records) {
            for (String r : records) {
                System.out.println(r);
            }
            System.out.println("RMQO-END " + records.size());
        }
        System.exit(0);
    }
}
