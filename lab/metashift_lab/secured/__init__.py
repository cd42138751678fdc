"""Secured stores for the tests and the lab: ZooKeeper over TLS with SASL (DIGEST-MD5, Kerberos
through a real MIT KDC), etcd with TLS and role-based access, Oxia with TLS and OIDC tokens, each
started on loopback with certificates, keytabs and keys the caller's temporary directory holds."""
