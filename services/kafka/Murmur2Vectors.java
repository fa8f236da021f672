/*
 * Murmur2 test vectors from the real Kafka client, for checking a Python port of
 * the Java producer's default partitioning of keyed records.
 *
 *   java -cp "$(cat kafka.cp)" services/kafka/Murmur2Vectors.java KEY...
 *   printf '%s\n' KEY... | java -cp "$(cat kafka.cp)" services/kafka/Murmur2Vectors.java
 *
 * Keys are taken as UTF-8 text: from the arguments, or one per stdin line when
 * there are no arguments (use stdin for keys with non-ASCII characters unless the
 * JVM's locale is UTF-8: arguments are decoded with the platform charset).
 * Output, one JSON line per key, ASCII only (non-ASCII escaped as \\uXXXX):
 *
 *   {"key":"abc","murmur2":479470107,"partitions":{"1":0,"3":...,"12":...,"50":...}}
 *
 * murmur2 is Utils.murmur2(key bytes) as a signed 32-bit int; partitions[n] is
 * Utils.toPositive(murmur2) % n, which is BuiltInPartitioner.partitionForKey(bytes, n)
 * (checked against it for every key).
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.apache.kafka.common.utils.Utils;

public class Murmur2Vectors {
    private static final int[] PARTITION_COUNTS = {1, 3, 12, 50};

    public static void main(String[] args) throws Exception {
        List<String> keys = new ArrayList<>();
        if (args.length > 0) {
            String jnu = System.getProperty("sun.jnu.encoding", "");
            for (String a : args) {
                if (!jnu.equalsIgnoreCase("UTF-8") && !a.chars().allMatch(c -> c < 128)) {
                    System.err.println("warning: arguments decoded as " + jnu + "; pass non-ASCII keys on stdin");
                }
                keys.add(a);
            }
        } else {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            for (String line; (line = in.readLine()) != null; ) {
                keys.add(line);
            }
        }
        StringBuilder out = new StringBuilder();
        for (String key : keys) {
            byte[] bytes = key.getBytes(StandardCharsets.UTF_8);
            int hash = Utils.murmur2(bytes);
            out.append("{\"key\":").append(jsonString(key)).append(",\"murmur2\":").append(hash).append(",\"partitions\":{");
            for (int i = 0; i < PARTITION_COUNTS.length; i++) {
                int n = PARTITION_COUNTS[i];
                int p = Utils.toPositive(hash) % n;
                if (p != BuiltInPartitioner.partitionForKey(bytes, n)) {
                    throw new IllegalStateException("BuiltInPartitioner disagrees for key " + key + " n=" + n);
                }
                out.append(i == 0 ? "" : ",").append('"').append(n).append("\":").append(p);
            }
            out.append("}}\n");
        }
        System.out.write(out.toString().getBytes(StandardCharsets.US_ASCII));
        System.out.flush();
    }

    private static String jsonString(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c == '"' || c == '\\') {
                b.append('\\').append(c);
            } else if (c < 0x20 || c > 0x7e) {
                b.append(String.format("\\u%04x", (int) c));
            } else {
                b.append(c);
            }
        }
        return b.append('"').toString();
    }
}
