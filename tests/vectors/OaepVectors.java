// Test vectors for lookupd/log/remote/oaep.py, wrapped by an independent implementation: BouncyCastle with the
// tiered-storage plugin's exact transformation. Run with Java 17 source launch:
//   java -cp /usr/share/java/bcprov.jar tests/vectors/OaepVectors.java > tests/vectors/oaep_sha3_512.json
// Prints JSON: {"keys": [{"bits", "private_key_pkcs8" (base64 DER)}],
//               "vectors": [{"key" (its index in keys), "message" (hex), "ciphertext" (base64)}]}.
import java.security.KeyPair;
import java.security.KeyPairGenerator;
import java.security.SecureRandom;
import java.security.Security;
import java.util.Base64;
import java.util.HexFormat;
import javax.crypto.Cipher;
import org.bouncycastle.jce.provider.BouncyCastleProvider;

public class OaepVectors {
    static final String TRANSFORMATION = "RSA/NONE/OAEPWithSHA3-512AndMGF1Padding";  // RsaEncryptionProvider's

    public static void main(String[] args) throws Exception {
        Security.addProvider(new BouncyCastleProvider());
        SecureRandom random = new SecureRandom();
        StringBuilder keys = new StringBuilder();
        StringBuilder vectors = new StringBuilder();
        int[] bitsList = {2048, 3072};
        for (int keyIndex = 0; keyIndex < bitsList.length; keyIndex++) {
            int bits = bitsList[keyIndex];
            KeyPairGenerator gen = KeyPairGenerator.getInstance("RSA");
            gen.initialize(bits, random);
            KeyPair pair = gen.generateKeyPair();
            keys.append(keyIndex == 0 ? "" : ",\n").append("  {\"bits\": ").append(bits)
                .append(", \"private_key_pkcs8\": \"")
                .append(Base64.getEncoder().encodeToString(pair.getPrivate().getEncoded())).append("\"}");
            int maxMessage = bits / 8 - 2 * 64 - 2;
            // An AES-256 data key (what the plugin wraps), then the edge lengths of OAEP with SHA3-512.
            int[] lengths = {32, 32, 0, 1, maxMessage};
            for (int length : lengths) {
                byte[] message = new byte[length];
                random.nextBytes(message);
                Cipher cipher = Cipher.getInstance(TRANSFORMATION, "BC");
                cipher.init(Cipher.ENCRYPT_MODE, pair.getPublic(), random);
                byte[] wrapped = cipher.doFinal(message);
                vectors.append(vectors.length() == 0 ? "" : ",\n").append("  {\"key\": ").append(keyIndex)
                    .append(", \"message\": \"").append(HexFormat.of().formatHex(message))
                    .append("\", \"ciphertext\": \"").append(Base64.getEncoder().encodeToString(wrapped))
                    .append("\"}");
            }
        }
        System.out.println("{\"keys\": [\n" + keys + "\n],\n\"vectors\": [\n" + vectors + "\n]}");
    }
}
