// Prints the official Java client's queue allocation for given inputs, as RebalanceImpl does it:
// Collections.sort on the queues and on the consumer ids, then strategy.allocate for each id.
//
// usage: AllocateOracle <case> [-- <case>]...
//   case: <strategy> <cid>[,<cid>...] <topic>/<broker>/<queueId>...
//   strategy: AVG | AVG_BY_CIRCLE | CONSISTENT_HASH[:<virtual nodes>]
//     | MACHINE_ROOM (consumeridcs r1, r2: brokers named r1@.. and r2@..)
//     | NEARBY_AVG | NEARBY_CIRCLE (AllocateMachineRoomNearby over AVG / AVG_BY_CIRCLE; a broker's
//       and a consumer's room: the text before the first '-', as tests/tests/consumer.rs says)
//     | CONFIG_EVEN (AllocateMessageQueueByConfig with the queues of even id)
// Output: one line per case and consumer id, in the order given:
//   RMQA <case index> <cid> <topic>/<broker>/<queueId>,...   (nothing after the cid if empty)
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragelyByCircle;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMachineRoomNearby;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueByConfig;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueByMachineRoom;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueConsistentHash;
import java.util.HashSet;
import org.apache.rocketmq.common.message.MessageQueue;

public final class AllocateOracle {
    public static void main(String[] args) {
        List<List<String>> cases = new ArrayList<>();
        List<String> cur = new ArrayList<>();
        for (String a : args) {
            if (a.equals("--")) {
                cases.add(cur);
                cur = new ArrayList<>();
            } else {
                cur.add(a);
            }
        }
        cases.add(cur);
        for (int c = 0; c < cases.size(); c++) {
            run(c, cases.get(c));
        }
    }

    private static void run(int index, List<String> args) {
        if (args.size() < 3) {
            System.err.println("usage: AllocateOracle <AVG|AVG_BY_CIRCLE|CONSISTENT_HASH[:n]> <cids> <topic/broker/qid>... [-- ...]");
            System.exit(2);
        }
        List<String> given = Arrays.asList(args.get(1).split(","));
        List<MessageQueue> mqAll = new ArrayList<>();
        for (int i = 2; i < args.size(); i++) {
            String[] p = args.get(i).split("/");
            mqAll.add(new MessageQueue(p[0], p[1], Integer.parseInt(p[2])));
        }
        Collections.sort(mqAll);
        AllocateMachineRoomNearby.MachineRoomResolver rooms = new AllocateMachineRoomNearby.MachineRoomResolver() {
            @Override
            public String brokerDeployIn(MessageQueue mq) {
                return mq.getBrokerName().split("-")[0];
            }

            @Override
            public String consumerDeployIn(String cid) {
                return cid.split("-")[0];
            }
        };
        AllocateMessageQueueStrategy strategy;
        if (args.get(0).equals("MACHINE_ROOM")) {
            AllocateMessageQueueByMachineRoom s = new AllocateMessageQueueByMachineRoom();
            s.setConsumeridcs(new HashSet<>(Arrays.asList("r1", "r2")));
            strategy = s;
        } else if (args.get(0).equals("NEARBY_AVG")) {
            strategy = new AllocateMachineRoomNearby(new AllocateMessageQueueAveragely(), rooms);
        } else if (args.get(0).equals("NEARBY_CIRCLE")) {
            strategy = new AllocateMachineRoomNearby(new AllocateMessageQueueAveragelyByCircle(), rooms);
        } else if (args.get(0).equals("CONFIG_EVEN")) {
            AllocateMessageQueueByConfig s = new AllocateMessageQueueByConfig();
            List<MessageQueue> even = new ArrayList<>();
            for (MessageQueue q : mqAll) {
                if (q.getQueueId() % 2 == 0) {
                    even.add(q);
                }
            }
            s.setMessageQueueList(even);
            strategy = s;
        } else if (args.get(0).equals("AVG")) {
            strategy = new AllocateMessageQueueAveragely();
        } else if (args.get(0).equals("AVG_BY_CIRCLE")) {
            strategy = new AllocateMessageQueueAveragelyByCircle();
        } else if (args.get(0).equals("CONSISTENT_HASH")) {
            strategy = new AllocateMessageQueueConsistentHash();
        } else if (args.get(0).startsWith("CONSISTENT_HASH:")) {
            int nodes = Integer.parseInt(args.get(0).substring("CONSISTENT_HASH:".length()));
            strategy = new AllocateMessageQueueConsistentHash(nodes);
        } else {
            throw new IllegalArgumentException("unknown strategy " + args.get(0));
        }
        List<String> cidAll = new ArrayList<>(given);
        Collections.sort(cidAll);
        for (String cid : given) {
            List<MessageQueue> mine = strategy.allocate("oracle_group", cid, mqAll, cidAll);
            StringBuilder sb = new StringBuilder("RMQA ").append(index).append(' ').append(cid).append(' ');
            for (int i = 0; i < mine.size(); i++) {
                MessageQueue q = mine.get(i);
                if (i > 0) {
                    sb.append(',');
                }
                sb.append(q.getTopic()).append('/').append(q.getBrokerName()).append('/').append(q.getQueueId());
            }
            System.out.println(sb);
        }
    }
}
