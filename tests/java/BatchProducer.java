// Sends ONE batch of messages with the official RocketMQ Java client (used to capture golden
// vectors of SEND_BATCH_MESSAGE); prints "RMQB {json}" with the send result.
//
// usage: BatchProducer <namesrv> <topic> <count> <group>
// Message i: body "batch-{i}", tags "TagB", keys "bk-{i}", user property idx={i}.
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.message.Message;

public final class BatchProducer {
    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: BatchProducer <namesrv> <topic> <count> <group>");
            System.exit(2);
        }
        DefaultMQProducer producer = new DefaultMQProducer(args[3]);
        producer.setNamesrvAddr(args[0]);
        producer.setInstanceName("batch-producer-" + System.nanoTime());
        producer.setSendMsgTimeout(10000);
        producer.setVipChannelEnabled(false);
        producer.start();
        int exit = 0;
        try {
            List<Message> msgs = new ArrayList<>();
            for (int i = 0; i < Integer.parseInt(args[2]); i++) {
                Message m = new Message(args[1], ("batch-" + i).getBytes(StandardCharsets.UTF_8));
                m.setTags("TagB");
                m.setKeys("bk-" + i);
                m.putUserProperty("idx", Integer.toString(i));
                msgs.add(m);
            }
            SendResult r = producer.send(msgs);
            System.out.println("RMQB " + new Json()
                .put("status", r.getSendStatus().name())
                .put("msgId", r.getMsgId())
                .put("offsetMsgId", r.getOffsetMsgId())
                .put("queueId", r.getMessageQueue().getQueueId())
                .put("queueOffset", r.getQueueOffset())
                .done());
        } catch (Throwable t) {
            t.printStackTrace();
            exit = 1;
        } finally {
            System.out.flush();
            producer.shutdown();
        }
        System.exit(exit);
    }
}
