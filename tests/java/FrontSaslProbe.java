// ZooKeeper's own Java client with SASL, driven by tests/test_front_sasl.py (compiled by the test
// with the JDK against Debian's jars). One JVM runs several clients in turn, each given as one
// argument "HOSTS|SECTION|STEP;STEP;...":
//
//   SECTION  the JAAS login section the client uses ("Client" is what a broker's JVM has;
//            "default": the client's configuration left as the JVM's system properties make it;
//            "nosasl": zookeeper.sasl.client=false for this client only; "sasl-on": true for it,
//            over the JVM's -Dzookeeper.sasl.client=false)
//   STEP     "create PATH VALUE" | "ephemeral PATH VALUE" | "createacl PATH VALUE SCHEME:ID"
//            (the node's ACL ALL for that id) | "get PATH" | "whoami"
//
// Per client: "CLIENT n", then "EVENT state" for every connection state the watcher sees (until
// the client is closed), "CONNECTED" or "AUTHFAILED" (or "TIMEOUT") once the first settles, then
// per step "OK step ..." or "ERR step CODE". The last line is always "DONE".

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.Watcher;
import org.apache.zookeeper.ZooDefs;
import org.apache.zookeeper.ZooKeeper;
import org.apache.zookeeper.client.ZKClientConfig;
import org.apache.zookeeper.data.ACL;
import org.apache.zookeeper.data.ClientInfo;
import org.apache.zookeeper.data.Id;

public class FrontSaslProbe {
    static final long WAIT_S = 20;  // bounds that turn a hang into a failure

    static synchronized void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        int n = 0;
        for (String spec : args) {
            String[] parts = spec.split("\\|", 3);
            out("CLIENT " + (++n));
            run(parts[0], parts[1], parts.length > 2 ? parts[2] : "");
        }
        out("DONE");
    }

    static void run(String hosts, String section, String steps) throws Exception {
        ZKClientConfig config = new ZKClientConfig();
        if (section.equals("nosasl")) {
            config.setProperty(ZKClientConfig.ENABLE_CLIENT_SASL_KEY, "false");
        } else if (section.equals("sasl-on")) {
            config.setProperty(ZKClientConfig.ENABLE_CLIENT_SASL_KEY, "true");
        } else if (!section.equals("default")) {
            config.setProperty(ZKClientConfig.LOGIN_CONTEXT_NAME_KEY, section);
        }
        // SASL's outcome comes after SyncConnected: wait for it when the client does SASL
        boolean sasl = config.isSaslClientEnabled();
        CountDownLatch settled = new CountDownLatch(1);
        AtomicReference<String> first = new AtomicReference<>();
        Watcher watcher = event -> {
            if (event.getType() != Watcher.Event.EventType.None) {
                return;
            }
            Watcher.Event.KeeperState state = event.getState();
            out("EVENT " + state);
            if (state == Watcher.Event.KeeperState.AuthFailed
                    || state == Watcher.Event.KeeperState.SaslAuthenticated
                    || state == Watcher.Event.KeeperState.SyncConnected && !sasl) {
                first.compareAndSet(null, state == Watcher.Event.KeeperState.AuthFailed ? "AUTHFAILED" : "CONNECTED");
                settled.countDown();
            }
        };
        ZooKeeper zk = new ZooKeeper(hosts, 30000, watcher, config);
        try {
            out(settled.await(WAIT_S, TimeUnit.SECONDS) ? first.get() : "TIMEOUT");
            for (String step : steps.split(";")) {
                if (!step.isBlank()) {
                    step(zk, step.trim());
                }
            }
        } finally {
            zk.close(5000);
        }
    }

    static void step(ZooKeeper zk, String step) {
        String[] w = step.split(" ");
        try {
            switch (w[0]) {
                case "create":
                    out("OK " + step + " " + zk.create(w[1], bytes(w[2]), ZooDefs.Ids.OPEN_ACL_UNSAFE,
                                                        CreateMode.PERSISTENT));
                    break;
                case "ephemeral":
                    zk.create(w[1], bytes(w[2]), ZooDefs.Ids.OPEN_ACL_UNSAFE, CreateMode.EPHEMERAL);
                    out("OK " + step + " owner=" + (zk.exists(w[1], false).getEphemeralOwner() == zk.getSessionId()));
                    break;
                case "createacl":
                    String[] id = w[3].split(":", 2);
                    List<ACL> acl = Collections.singletonList(new ACL(ZooDefs.Perms.ALL, new Id(id[0], id[1])));
                    out("OK " + step + " " + zk.create(w[1], bytes(w[2]), acl, CreateMode.PERSISTENT));
                    break;
                case "get":
                    out("OK " + step + " " + new String(zk.getData(w[1], false, null), StandardCharsets.UTF_8));
                    break;
                case "whoami":
                    List<String> ids = new ArrayList<>();
                    for (ClientInfo info : zk.whoAmI()) {
                        ids.add(info.getAuthScheme() + ":" + info.getUser());
                    }
                    out("OK " + step + " " + String.join(",", ids));
                    break;
                default:
                    out("ERR " + step + " unknown step");
            }
        } catch (KeeperException e) {
            out("ERR " + step + " " + e.code());
        } catch (Exception e) {
            out("ERR " + step + " " + e);
        }
    }

    static byte[] bytes(String text) {
        return text.getBytes(StandardCharsets.UTF_8);
    }
}
