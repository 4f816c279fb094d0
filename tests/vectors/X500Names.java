// What Kafka names a TLS client: DefaultKafkaPrincipalBuilder takes X500Principal.getName() (RFC 2253) of the
// client certificate's subject. For tests/test_principal.py: reads hex DER Names (of subjects), one a line, on
// standard input, and prints each one's getName() as the hex of its UTF-8 bytes (stdout's charset is the
// platform's), or "!" and the exception for a Name the JDK refuses. Java 17 source launch:
//   java tests/vectors/X500Names.java < names.hex
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.HexFormat;
import javax.security.auth.x500.X500Principal;

public class X500Names {
    public static void main(String[] args) throws Exception {
        HexFormat hex = HexFormat.of();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        String line;
        while ((line = in.readLine()) != null) {
            try {
                String name = new X500Principal(hex.parseHex(line.trim())).getName();
                System.out.println(hex.formatHex(name.getBytes(StandardCharsets.UTF_8)));
            } catch (IllegalArgumentException err) {
                System.out.println("!" + err.getMessage());
            }
        }
    }
}
