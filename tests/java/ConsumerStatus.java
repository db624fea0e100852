// Reads a consumer's status the way the operators' tools do: DefaultMQAdminExt.getConsumeStatus
// asks a broker of the topic (INVOKE_BROKER_TO_GET_CONSUMER_STATUS, 223), which asks the group's
// clients (GET_CONSUMER_STATUS_FROM_CLIENT, 221) and returns what each answered.
//
// usage: ConsumerStatus <namesrv> <topic> <group> [<clientId>]
// Output: one line per client and queue, sorted:
//   RMQS <clientId> <topic>/<broker>/<queueId> <offset>
// and a last line `RMQS-CLIENTS <n>` (how many clients answered).
import java.util.Map;
import java.util.TreeMap;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public final class ConsumerStatus {
    public static void main(String[] args) throws Exception {
        if (args.length < 3) {
            System.err.println("usage: ConsumerStatus <namesrv> <topic> <group> [<clientId>]");
            System.exit(2);
        }
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(args[0]);
        admin.setInstanceName("rmq-consumer-status-" + System.nanoTime());
        admin.start();
        try {
            String clientId = args.length > 3 ? args[3] : "";
            Map<String, Map<MessageQueue, Long>> status =
                admin.getConsumeStatus(args[1], args[2], clientId);
            TreeMap<String, Long> lines = new TreeMap<>();
            for (Map.Entry<String, Map<MessageQueue, Long>> c : status.entrySet()) {
                for (Map.Entry<MessageQueue, Long> q : c.getValue().entrySet()) {
                    MessageQueue mq = q.getKey();
                    lines.put(c.getKey() + " " + mq.getTopic() + "/" + mq.getBrokerName() + "/"
                        + mq.getQueueId(), q.getValue());
                }
            }
            for (Map.Entry<String, Long> l : lines.entrySet()) {
                System.out.println("RMQS " + l.getKey() + " " + l.getValue());
            }
            System.out.println("RMQS-CLIENTS " + status.size());
        } finally {
            admin.shutdown();
        }
    }
}
