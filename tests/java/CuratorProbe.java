// A small Apache Curator program driven by tests/test_zk_front_java.py and
// tests/test_zk_front_migration.py (compiled by the tests with the JDK against Debian's jars).
//
//   java CuratorProbe recipes HOSTS   LeaderLatch, InterProcessMutex, PersistentNode and
//                                     DistributedAtomicLong; one "name value" line per result
//   java CuratorProbe hold HOSTS ID   holds an InterProcessMutex and an ephemeral PersistentNode,
//                                     writes until a line "stop" on stdin; "ACK path value" per
//                                     acknowledged write, "STATE s" per connection state change,
//                                     "ERROR e" on any failure; then the lock's state.
//
// The last line is always "DONE". A failure prints "ERROR ..." and exits 1.

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.curator.RetryPolicy;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.atomic.AtomicValue;
import org.apache.curator.framework.recipes.atomic.DistributedAtomicLong;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.nodes.PersistentNode;
import org.apache.curator.retry.RetryNTimes;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.data.Stat;

public class CuratorProbe {
    static final long WAIT_S = 20;  // bounds that turn a hang into a failure

    static synchronized void out(String line) {
        System.out.println(line);
        System.out.flush();
    }

    static CuratorFramework client(String hosts, RetryPolicy retry) throws Exception {
        CuratorFramework c = CuratorFrameworkFactory.builder().connectString(hosts)
            .sessionTimeoutMs(10000).connectionTimeoutMs(15000).retryPolicy(retry).build();
        c.getConnectionStateListenable().addListener((cf, state) -> out("STATE " + state));
        c.start();
        if (!c.blockUntilConnected((int) WAIT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("not connected to " + hosts);
        }
        return c;
    }

    static void waitFor(String what, java.util.concurrent.Callable<Boolean> check) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(WAIT_S);
        while (!check.call()) {
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("not within " + WAIT_S + "s: " + what);
            }
            Thread.sleep(20);
        }
    }

    static String str(byte[] b) {
        return new String(b, StandardCharsets.UTF_8);
    }

    static byte[] bytes(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    public static void main(String[] args) {
        try {
            if (args[0].equals("recipes")) {
                recipes(args[1]);
            } else {
                hold(args[1], args[2]);
            }
            out("DONE");
            System.exit(0);
        } catch (Throwable e) {
            out("ERROR " + e);
            e.printStackTrace();
            out("DONE");
            System.exit(1);
        }
    }

    // ---- recipes ------------------------------------------------------------------------------

    static void recipes(String hosts) throws Exception {
        RetryPolicy retry = new RetryNTimes(3, 200);
        CuratorFramework a = client(hosts, retry);
        CuratorFramework b = client(hosts, retry);

        // LeaderLatch: the first to start leads; the other takes over when it closes
        LeaderLatch la = new LeaderLatch(a, "/latch", "a");
        LeaderLatch lb = new LeaderLatch(b, "/latch", "b");
        la.start();
        out("latch.a.leads " + la.await(WAIT_S, TimeUnit.SECONDS));
        lb.start();
        waitFor("two latch participants", () -> la.getParticipants().size() == 2);
        out("latch.leader " + lb.getLeader().getId());
        out("latch.b.leads " + lb.hasLeadership());
        la.close();
        out("latch.b.leads.after.a.closes " + lb.await(WAIT_S, TimeUnit.SECONDS));
        out("latch.leader.after.a.closes " + lb.getLeader().getId());
        lb.close();

        // InterProcessMutex: exclusive between clients, reentrant within one
        InterProcessMutex ma = new InterProcessMutex(a, "/mutex");
        InterProcessMutex mb = new InterProcessMutex(b, "/mutex");
        out("mutex.a.acquires " + ma.acquire(WAIT_S, TimeUnit.SECONDS));
        out("mutex.a.reenters " + ma.acquire(WAIT_S, TimeUnit.SECONDS));
        out("mutex.b.acquires.while.a.holds " + mb.acquire(0, TimeUnit.MILLISECONDS));
        out("mutex.participants " + ma.getParticipantNodes().size());
        ma.release();
        out("mutex.a.holds.after.one.release " + ma.isAcquiredInThisProcess());
        ma.release();
        out("mutex.b.acquires.after.a.releases " + mb.acquire(WAIT_S, TimeUnit.SECONDS));
        mb.release();
        out("mutex.participants.after.release " + mb.getParticipantNodes().size());

        // PersistentNode: an ephemeral kept alive by its owner, re-created when deleted
        PersistentNode pn = new PersistentNode(a, CreateMode.EPHEMERAL, false, "/pn/node", bytes("one"));
        pn.start();
        out("pnode.created " + pn.waitForInitialCreate(WAIT_S, TimeUnit.SECONDS));
        Stat stat = new Stat();
        out("pnode.value " + str(b.getData().storingStatIn(stat).forPath("/pn/node")));
        out("pnode.owner.is.a " + (stat.getEphemeralOwner() == a.getZookeeperClient().getZooKeeper().getSessionId()));
        b.delete().forPath("/pn/node");
        waitFor("the persistent node re-created", () -> b.checkExists().forPath("/pn/node") != null);
        out("pnode.value.after.delete " + str(b.getData().forPath("/pn/node")));
        pn.setData(bytes("two"));
        waitFor("the persistent node's new value", () -> str(b.getData().forPath("/pn/node")).equals("two"));
        out("pnode.value.after.set " + str(b.getData().forPath("/pn/node")));
        pn.close();
        out("pnode.exists.after.close " + (b.checkExists().forPath("/pn/node") != null));

        // DistributedAtomicLong: optimistic compare-and-set on the node's version
        DistributedAtomicLong counter = new DistributedAtomicLong(a, "/counter", new RetryNTimes(10, 10));
        DistributedAtomicLong other = new DistributedAtomicLong(b, "/counter", new RetryNTimes(10, 10));
        AtomicValue<Long> v = counter.increment();
        out("counter.increment " + v.succeeded() + " " + v.preValue() + " " + v.postValue());
        v = other.add(5L);
        out("counter.add " + v.succeeded() + " " + v.preValue() + " " + v.postValue());
        v = counter.compareAndSet(6L, 10L);
        out("counter.cas.right " + v.succeeded() + " " + v.postValue());
        v = other.compareAndSet(6L, 11L);
        out("counter.cas.wrong " + v.succeeded() + " " + v.postValue());
        v = counter.decrement();
        out("counter.decrement " + v.succeeded() + " " + v.postValue());
        out("counter.get " + other.get().postValue());

        a.close();
        b.close();
    }

    // ---- hold: a lock, an ephemeral and writes held across a migration ------------------------

    static void hold(String hosts, String id) throws Exception {
        // no retries: a connection loss or any other failure surfaces as an error
        CuratorFramework c = client(hosts, new RetryNTimes(0, 100));
        String lockPath = "/curlocks/" + id;
        InterProcessMutex mutex = new InterProcessMutex(c, lockPath);
        if (!mutex.acquire(WAIT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("lock not acquired");
        }
        out("LOCKED " + mutex.getParticipantNodes().iterator().next());
        PersistentNode pn = new PersistentNode(c, CreateMode.EPHEMERAL, false, "/curclients/" + id, bytes(id));
        pn.start();
        if (!pn.waitForInitialCreate(WAIT_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("persistent node not created");
        }
        out("EPHEMERAL " + pn.getActualPath());

        AtomicBoolean stop = new AtomicBoolean(false);
        Thread reader = new Thread(() -> {
            try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                String line;
                while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
                    // ignore anything else
                }
            } catch (Exception e) {
                out("ERROR stdin " + e);
            }
            stop.set(true);
        });
        reader.setDaemon(true);
        reader.start();

        String base = "/curwriters/" + id;
        c.create().creatingParentsIfNeeded().forPath(base + "/counter", bytes("0"));
        out("ACK " + base + "/counter 0");
        int version = 0;
        int i = 0;
        String failure = null;
        while (!stop.get()) {
            i++;
            try {
                version = c.setData().withVersion(version).forPath(base + "/counter", bytes(Integer.toString(i))).getVersion();
                out("ACK " + base + "/counter " + i);
                String item = base + "/item-" + i;
                c.create().forPath(item, bytes("v" + i));
                out("ACK " + item + " v" + i);
                if (i % 5 == 0) {
                    String seq = c.create().withMode(CreateMode.PERSISTENT_SEQUENTIAL).forPath(base + "/seq-", bytes("s"));
                    out("ACK " + seq + " s");
                }
            } catch (Exception e) {
                failure = e.toString();
                out("ERROR " + failure);
                break;
            }
            Thread.sleep(20);
        }
        out("WRITES " + i);
        // the lock is still this client's: held, first in line, and a newcomer cannot take it
        out("HELD " + mutex.isAcquiredInThisProcess());
        List<String> nodes = List.copyOf(mutex.getParticipantNodes());
        out("FIRST " + (nodes.isEmpty() ? "none" : nodes.get(0)));
        CuratorFramework newcomer = client(hosts, new RetryNTimes(0, 100));
        InterProcessMutex contender = new InterProcessMutex(newcomer, lockPath);
        out("NEWCOMER_ACQUIRES " + contender.acquire(0, TimeUnit.MILLISECONDS));
        out("SESSION " + Long.toHexString(c.getZookeeperClient().getZooKeeper().getSessionId()));
        newcomer.close();
        mutex.release();
        pn.close();
        c.close();
        if (failure != null) {
            throw new IllegalStateException(failure);
        }
    }
}
