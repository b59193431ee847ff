package embedded

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is a JetStream cluster of nats-servers in the process, routed to
// each other on loopback: for tests and fault runs that kill and restart
// nodes (each keeps its ports and its store, as a real node restarting
// does).
type Cluster struct {
	Nodes []*server.Server
	opts  []*server.Options
}

// StartCluster starts n nodes storing under dir and waits for a JetStream
// meta leader that counts every node as a peer.
func StartCluster(n int, dir string) (*Cluster, error) {
	if n < 1 {
		return nil, errors.New("cluster: want at least one node")
	}
	ports, err := freePorts(2 * n)
	if err != nil {
		return nil, err
	}
	var routes []*url.URL
	for i := range n {
		u, _ := url.Parse(fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i]))
		routes = append(routes, u)
	}
	c := &Cluster{}
	for i := range n {
		c.opts = append(c.opts, &server.Options{ServerName: fmt.Sprintf("N%d", i+1), Host: "127.0.0.1", Port: ports[i],
			JetStream: true, StoreDir: filepath.Join(dir, fmt.Sprintf("n%d", i+1)), MaxPayload: 1 << 20, SyncInterval: ClusterSyncInterval,
			Cluster: server.ClusterOpts{Name: "compactor-cluster", Host: "127.0.0.1", Port: ports[n+i]},
			Routes:  routes, NoLog: true, NoSigs: true,
			// A client that stops answering pings (a paused or wedged
			// replica) is dropped within seconds, so the requests its
			// subscriptions would take go to the live ones.
			PingInterval: StalePingInterval, MaxPingsOut: StaleMaxPings})
		c.Nodes = append(c.Nodes, nil)
	}
	for i := range n {
		if err := c.Restart(i); err != nil {
			c.Shutdown()
			return nil, err
		}
	}
	// A meta leader is elected by a quorum, before every node has
	// joined: an R3 asset created then finds "no suitable peers for
	// placement" (a loaded machine's test setup did). Ready is when the
	// leader counts every node as a peer with its JetStream stats, as
	// nats-server's own tests wait (waitOnPeerCount).
	deadline := time.Now().Add(60 * time.Second)
	for {
		l := c.MetaLeader()
		if l >= 0 && len(c.Nodes[l].JetStreamClusterPeers()) == n {
			return c, nil
		}
		if time.Now().After(deadline) {
			c.Shutdown()
			if l < 0 {
				return nil, errors.New("cluster: no JetStream meta leader within 60s")
			}
			return nil, fmt.Errorf("cluster: the meta leader counts %d of %d peers after 60s", len(c.Nodes[l].JetStreamClusterPeers()), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// URL is node i's client URL.
func (c *Cluster) URL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.opts[i].Port) }

// URLs lists every node's client URL, comma-separated (a client's server
// list: it reconnects to another node when one dies).
func (c *Cluster) URLs() string {
	var us []string
	for i := range c.opts {
		us = append(us, c.URL(i))
	}
	return strings.Join(us, ",")
}

// Kill stops node i at once (its clients are disconnected).
func (c *Cluster) Kill(i int) {
	if s := c.Nodes[i]; s != nil {
		s.Shutdown()
		s.WaitForShutdown()
		c.Nodes[i] = nil
	}
}

// StalePingInterval and StaleMaxPings make a server drop a client that
// has answered none of its pings for about 3-4 s (nats-server's defaults,
// 2 minutes and 2, keep a paused replica's subscriptions for minutes, and
// a server hands queue-group requests to its own clients first: every
// endpoint request that reached the paused replica's server went to it).
const (
	StalePingInterval = time.Second
	StaleMaxPings     = 2
)

// WaitCurrent waits until node i's JetStream is current with the cluster
// (its health check passes), at most within.
func (c *Cluster) WaitCurrent(i int, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		s := c.Nodes[i]
		if s != nil {
			if st := s.Healthz(nil); st.Status == "ok" {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster node %d: not current within %v", i+1, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Restart starts node i again on its ports and store.
func (c *Cluster) Restart(i int) error {
	if c.Nodes[i] != nil {
		return nil
	}
	o := *c.opts[i]
	s, err := server.NewServer(&o)
	if err != nil {
		return fmt.Errorf("cluster node %d: %w", i+1, err)
	}
	go s.Start()
	if !s.ReadyForConnections(20 * time.Second) {
		s.Shutdown()
		return fmt.Errorf("cluster node %d: not ready within 20s", i+1)
	}
	c.Nodes[i] = s
	return nil
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for i := range c.Nodes {
		c.Kill(i)
	}
}

// MetaLeader is the index of the JetStream meta leader, -1 when none.
func (c *Cluster) MetaLeader() int {
	for i, s := range c.Nodes {
		if s != nil && s.JetStreamIsLeader() {
			return i
		}
	}
	return -1
}

// StreamLeader is the index of the node leading stream, -1 when none.
func (c *Cluster) StreamLeader(stream string) int {
	for i, s := range c.Nodes {
		if s != nil && s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}
