// A member of a consumer group on the official RocketMQ Java client, for mixed groups (Java and
// rmq members allocating alike): a push consumer of <topic> in <group> with the allocation
// strategy <strategy> (AVG, CONSISTENT_HASH, or NEARBY_AVG: AllocateMachineRoomNearby over AVG
// with the rooms before the first '-' of broker names and client ids). After <millis> it prints
// its client id ("RMQG-ID <cid>"), the queues of <topic> its rebalance holds,
// "RMQG <topic>/<broker>/<queueId>" each, then "RMQG-END <count>", and shuts down.
//
// usage: GroupMember <namesrv> <topic> <group> <strategy> <millis>
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMachineRoomNearby;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueConsistentHash;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageQueue;

public final class GroupMember {
    public static void main(String[] args) throws Exception {
        if (args.length < 5) {
            System.err.println("usage: GroupMember <namesrv> <topic> <group> <strategy> <millis>");
            System.exit(2);
        }
        String topic = args[1];
        AllocateMessageQueueStrategy strategy;
        switch (args[3]) {
            case "AVG":
                strategy = new AllocateMessageQueueAveragely();
                break;
            case "CONSISTENT_HASH":
                strategy = new AllocateMessageQueueConsistentHash();
                break;
            case "NEARBY_AVG":
                strategy = new AllocateMachineRoomNearby(new AllocateMessageQueueAveragely(),
                    new AllocateMachineRoomNearby.MachineRoomResolver() {
                        @Override
                        public String brokerDeployIn(MessageQueue mq) {
                            return mq.getBrokerName().split("-")[0];
                        }

                        @Override
                        public String consumerDeployIn(String cid) {
                            return cid.split("-")[0];
                        }
                    });
                break;
            default:
                throw new IllegalArgumentException("unknown strategy " + args[3]);
        }
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(args[2]);
        consumer.setNamesrvAddr(args[0]);
        consumer.setInstanceName("member-" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setAllocateMessageQueueStrategy(strategy);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) ->
            ConsumeConcurrentlyStatus.CONSUME_SUCCESS);
        consumer.start();
        Thread.sleep(Long.parseLong(args[4]));
        List<String> mine = new ArrayList<>();
        for (MessageQueue q : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl()
            .getProcessQueueTable().keySet()) {
            if (q.getTopic().equals(topic)) {
                mine.add(q.getTopic() + "/" + q.getBrokerName() + "/" + q.getQueueId());
            }
        }
        Collections.sort(mine);
        System.out.println("RMQG-ID " + consumer.getDefaultMQPushConsumerImpl().getmQClientFactory().getClientId());
        for (String q : mine) {
            System.out.println("RMQG " + q);
        }
        System.out.println("RMQG-END " + mine.size());
        consumer.shutdown();
        System.exit(0);
    }
}
