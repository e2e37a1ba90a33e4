// The principal of a connection on a Kafka node's internal listeners (CONTROLLER, INTERNAL) is
// User:kafka-node, a super user; clients on PLAINTEXT stay User:ANONYMOUS. Lets a multi-node KRaft
// cluster form under StandardAuthorizer while ACLs still apply to ANONYMOUS clients, as a
// SASL-authenticated inter-broker principal does in client test suites' own clusters.
import org.apache.kafka.common.security.auth.AuthenticationContext;
import org.apache.kafka.common.security.auth.KafkaPrincipal;
import org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder;

public class NodePrincipalBuilder extends DefaultKafkaPrincipalBuilder {
    public NodePrincipalBuilder() {
        super(null, null);
    }

    @Override
    public KafkaPrincipal build(AuthenticationContext context) {
        String listener = context.listenerName();
        if ("CONTROLLER".equals(listener) || "INTERNAL".equals(listener)) {
            return new KafkaPrincipal(KafkaPrincipal.USER_TYPE, "kafka-node");
        }
        return super.build(context);
    }
}
