// Tiny JSON writer shared by the Java helpers of the rmq test harness.
import java.net.InetSocketAddress;
import java.net.SocketAddress;

final class Json {
    private final StringBuilder sb = new StringBuilder("{");
    private boolean first = true;

    private Json key(String k) {
        if (!first) {
            sb.append(',');
        }
        first = false;
        str(sb, k);
        sb.append(':');
        return this;
    }

    Json put(String k, String v) {
        key(k);
        if (v == null) {
            sb.append("null");
        } else {
            str(sb, v);
        }
        return this;
    }

    Json put(String k, long v) {
        key(k);
        sb.append(v);
        return this;
    }

    Json put(String k, boolean v) {
        key(k);
        sb.append(v);
        return this;
    }

    Json putRaw(String k, String rawJson) {
        key(k);
        sb.append(rawJson);
        return this;
    }

    String done() {
        return sb.append('}').toString();
    }

    static String map(java.util.Map<String, String> m) {
        Json j = new Json();
        for (java.util.Map.Entry<String, String> e : new java.util.TreeMap<>(m).entrySet()) {
            j.put(e.getKey(), e.getValue());
        }
        return j.done();
    }

    static String addr(SocketAddress a) {
        if (a instanceof InetSocketAddress) {
            InetSocketAddress i = (InetSocketAddress) a;
            String host = i.getAddress() != null ? i.getAddress().getHostAddress() : i.getHostString();
            return host + ":" + i.getPort();
        }
        return a == null ? null : a.toString();
    }

    static void str(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': sb.append("\\\""); break;
                case '\\': sb.append("\\\\"); break;
                case '\n': sb.append("\\n"); break;
                case '\r': sb.append("\\r"); break;
                case '\t': sb.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
            }
        }
        sb.append('"');
    }
}
