// A requester on the official RocketMQ Java client: DefaultMQProducer.request(msg, callback,
// timeout) with body "q-<i>" for i in 0..count, one after the other; each reply must say
// "r:q-<i>". The callback form, because the blocking request(msg, timeout) of client 5.3.3
// returns "wait reply message timeout" as soon as the broker acknowledges the send unless the
// reply came first (apache/rocketmq #8272 counts its latch down on the send's success); the
// callback form, in 5.3.3, calls onSuccess(null) at that point, then onSuccess(reply).
//
// usage: JavaRequester <namesrv> <topic> <count> <timeoutMs>
// Prints "RMQQ-END <matched> <failed>" (a failed request: an exception or a wrong reply; the
// first few are printed as "RMQQ-ERR <i> <why>").
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.producer.RequestCallback;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.message.Message;

public final class JavaRequester {
    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: JavaRequester <namesrv> <topic> <count> <timeoutMs>");
            System.exit(2);
        }
        int count = Integer.parseInt(args[2]);
        long timeout = Long.parseLong(args[3]);
        DefaultMQProducer producer = new DefaultMQProducer("java-requester");
        producer.setNamesrvAddr(args[0]);
        producer.setInstanceName("requester-" + System.nanoTime());
        producer.start();
        int matched = 0;
        int failed = 0;
        for (int i = 0; i < count; i++) {
            String body = "q-" + i;
            try {
                CompletableFuture<Message> done = new CompletableFuture<>();
                producer.request(new Message(args[1], body.getBytes(StandardCharsets.UTF_8)), new RequestCallback() {
                    @Override
                    public void onSuccess(Message m) {
                        if (m != null) {
                            done.complete(m);
                        }
                    }

                    @Override
                    public void onException(Throwable e) {
                        done.completeExceptionally(e);
                    }
                }, timeout);
                Message reply = done.get(timeout + 2000, TimeUnit.MILLISECONDS);
                String got = new String(reply.getBody(), StandardCharsets.UTF_8);
                if (got.equals("r:" + body)) {
                    matched++;
                } else {
                    failed++;
                    if (failed <= 5) {
                        System.out.println("RMQQ-ERR " + i + " reply " + got);
                    }
                }
            } catch (Exception e) {
                failed++;
                if (failed <= 5) {
                    System.out.println("RMQQ-ERR " + i + " " + e);
                }
            }
        }
        producer.shutdown();
        System.out.println("RMQQ-END " + matched + " " + failed);
        System.exit(0);
    }
}
