// An SQL92 subscriber on the official RocketMQ Java client: a push consumer of group <group>
// subscribed with MessageSelector.bySql(<sql>) from the first offset. Prints "RMQS <body>" per
// message (bodies as UTF-8 text), then "RMQS-END <count>" once no message came for idleMillis
// (after the first) or maxMillis passed in all.
//
// usage: SqlConsumer <namesrv> <topic> <group> <sql> <idleMillis> <maxMillis>
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public final class SqlConsumer {
    public static void main(String[] args) throws Exception {
        if (args.length < 6) {
            System.err.println("usage: SqlConsumer <namesrv> <topic> <group> <sql> <idleMillis> <maxMillis>");
            System.exit(2);
        }
        long idle = Long.parseLong(args[4]);
        long max = Long.parseLong(args[5]);
        ConcurrentLinkedQueue<String> got = new ConcurrentLinkedQueue<>();
        AtomicLong last = new AtomicLong();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args[2]);
        consumer.setNamesrvAddr(args[0]);
        consumer.setInstanceName("sql-" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(args[1], MessageSelector.bySql(args[3]));
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                got.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
            last.set(System.currentTimeMillis());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long start = System.currentTimeMillis();
        while (true) {
            Thread.sleep(100);
            long now = System.currentTimeMillis();
            long l = last.get();
            if (now - start > max || (l > 0 && now - l > idle)) {
                break;
            }
        }
        consumer.shutdown();
        int n = 0;
        for (String b : got) {
            System.out.println("RMQS " + b);
            n++;
        }
        System.out.println("RMQS-END " + n);
        System.exit(0);
    }
}
