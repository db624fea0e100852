// Prints the official Java client's queue allocation for given inputs, as RebalanceImpl does it:
// Collections.sort on the queues and on the consumer ids, then strategy.allocate for each id.
//
// usage: AllocateOracle <AVG|AVG_BY_CIRCLE> <cid>[,<cid>...] <topic>/<broker>/<queueId>...
// Output: one line per consumer id, in the order given:
//   RMQA <cid> <topic>/<broker>/<queueId>,...     (empty list: nothing after the cid)
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import org.apache.rocketmq.client.consumer.AllocateMessageQueueStrategy;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragelyByCircle;
import org.apache.rocketmq.common.message.MessageQueue;

public final class AllocateOracle {
    public static void main(String[] args) {
        if (args.length < 3) {
            System.err.println("usage: AllocateOracle <AVG|AVG_BY_CIRCLE> <cids> <topic/broker/qid>...");
            System.exit(2);
        }
        AllocateMessageQueueStrategy strategy;
        if (args[0].equals("AVG")) {
            strategy = new AllocateMessageQueueAveragely();
        } else if (args[0].equals("AVG_BY_CIRCLE")) {
            strategy = new AllocateMessageQueueAveragelyByCircle();
        } else {
            throw new IllegalArgumentException("unknown strategy " + args[0]);
        }
        List<String> given = Arrays.asList(args[1].split(","));
        List<MessageQueue> mqAll = new ArrayList<>();
        for (int i = 2; i < args.length; i++) {
            String[] p = args[i].split("/");
            mqAll.add(new MessageQueue(p[0], p[1], Integer.parseInt(p[2])));
        }
        Collections.sort(mqAll);
        List<String> cidAll = new ArrayList<>(given);
        Collections.sort(cidAll);
        for (String cid : given) {
            List<MessageQueue> mine = strategy.allocate("oracle_group", cid, mqAll, cidAll);
            StringBuilder sb = new StringBuilder("RMQA ").append(cid).append(' ');
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
