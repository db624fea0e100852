// A POP consumer on the official RocketMQ Java client (5.x): a push consumer of group <group>
// with client rebalance off (DefaultMQPushConsumer#setClientRebalance(false)), so that it asks
// the broker for its assignment (QUERY_ASSIGNMENT) and pops the queues the broker hands out in
// POP mode (set beforehand: `rmq consume-mode`, or `mqadmin setConsumeMode -m POP`). Every
// message is consumed successfully (the client acknowledges it with ACK_MESSAGE). Prints
// "RMQP <body>" per message (bodies as UTF-8 text), then "RMQP-END <count>" once no message
// came for idleMillis (after the first) or maxMillis passed in all. Once the broker has
// assigned it a queue to pop (its first rebalance can come before its first heartbeat is
// known, and the next only 20 s later), it creates the file <readyFile>; with no POP
// assignment within 60 s it exits with 3.
//
// The 5.x methods are called by reflection: every class here is compiled against the 4.9
// client too.
//
// usage: PopJavaConsumer <namesrv> <topic> <group> <idleMillis> <maxMillis> <readyFile>
import java.nio.charset.StandardCharsets;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

public final class PopJavaConsumer {
    // The queues the broker assigned it to pop (RebalanceImpl#getPopProcessQueueTable, 5.x).
    static Map<?, ?> popQueues(DefaultMQPushConsumer consumer) throws Exception {
        Object rebalance = consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl();
        return (Map<?, ?>) rebalance.getClass().getMethod("getPopProcessQueueTable").invoke(rebalance);
    }

    public static void main(String[] args) throws Exception {
        if (args.length < 6) {
            System.err.println("usage: PopJavaConsumer <namesrv> <topic> <group> <idleMillis> <maxMillis> <readyFile>");
            System.exit(2);
        }
        long idle = Long.parseLong(args[3]);
        long max = Long.parseLong(args[4]);
        ConcurrentLinkedQueue<String> got = new ConcurrentLinkedQueue<>();
        AtomicLong last = new AtomicLong();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args[2]);
        consumer.setNamesrvAddr(args[0]);
        consumer.setInstanceName("pop-" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        DefaultMQPushConsumer.class.getMethod("setClientRebalance", boolean.class).invoke(consumer, false);
        DefaultMQPushConsumer.class.getMethod("setPopBatchNums", int.class).invoke(consumer, 4);
        consumer.subscribe(args[1], "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                got.add(new String(m.getBody(), StandardCharsets.UTF_8));
            }
            last.set(System.currentTimeMillis());
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        long start = System.currentTimeMillis();
        while (popQueues(consumer).isEmpty()) {
            if (System.currentTimeMillis() - start > 60000) {
                System.out.println("RMQP-NO-POP-ASSIGNMENT pull queues: "
                    + consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet());
                System.exit(3);
            }
            consumer.getDefaultMQPushConsumerImpl().doRebalance();
            Thread.sleep(200);
        }
        System.out.println("RMQP-ASSIGNED " + popQueues(consumer).keySet());
        java.nio.file.Files.createFile(java.nio.file.Paths.get(args[5]));
        start = System.currentTimeMillis();
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
            System.out.println("RMQP " + b);
            n++;
        }
        System.out.println("RMQP-END " + n);
        System.exit(0);
    }
}
