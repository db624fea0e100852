// A replier on the official RocketMQ Java client: a push consumer (from the first offset) that
// answers every request with MessageUtil.createReplyMessage(request, "r:" + body), sent by a
// DefaultMQProducer (SEND_REPLY_MESSAGE_V2 to <CLUSTER>_REPLY_TOPIC).
//
// usage: JavaReplier <namesrv> <topic> <group> <idleMillis> <maxMillis>
// Runs until idleMillis passed without a request (after the first), or maxMillis in all; then
// prints "RMQR-END <replied> <failed>".
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public final class JavaReplier {
    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: JavaReplier <namesrv> <topic> <group> <idleMillis> <maxMillis>");
            System.exit(2);
        }
        long idle = Long.parseLong(args[3]);
        long max = Long.parseLong(args[4]);
        DefaultMQProducer producer = new DefaultMQProducer(args[2] + "-producer");
        producer.setNamesrvAddr(args[0]);
        producer.setInstanceName("replier-" + System.nanoTime());
        producer.start();
        AtomicLong replied = new AtomicLong();
        AtomicLong failed = new AtomicLong();
        AtomicLong last = new AtomicLong();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args[2]);
        consumer.setNamesrvAddr(args[0]);
        consumer.setInstanceName("replier-" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(args[1], "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                String body = "r:" + new String(m.getBody(), StandardCharsets.UTF_8);
                long t0 = System.currentTimeMillis();
                try {
                    Message reply = MessageUtil.createReplyMessage(m, body.getBytes(StandardCharsets.UTF_8));
                    producer.send(reply, 3000);
                    replied.incrementAndGet();
                } catch (Exception e) {
                    failed.incrementAndGet();
                    long t1 = System.currentTimeMillis();
                    System.err.println("reply failed after " + (t1 - t0) + " ms (request born "
                        + (t1 - m.getBornTimestamp()) + " ms ago, at " + t1 + "): " + e);
                }
                last.set(System.currentTimeMillis());
            }
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
        producer.shutdown();
        System.out.println("RMQR-END " + replied.get() + " " + failed.get());
        System.exit(0);
    }
}
