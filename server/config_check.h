// What `aside-server --check-config` checks beyond parsing the file: every
// file the config names is loaded as start-up would load it, so that "ok"
// means the server starts (or fails only on what a check cannot see: ports
// in use, the state database, reaching etcd).
#ifndef ASIDE_SERVER_CONFIG_CHECK_H_
#define ASIDE_SERVER_CONFIG_CHECK_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/config/config.h"

namespace aside::server {

// Loads the session key file (at least 16 bytes), the admin token file
// (parsed as AdminAuth does), and the TLS certificate chain, private key
// (which must match the certificate) and client CA bundle (PEM), and with
// the etcd store its CA bundle, client certificate and key, and credentials
// file (one line "username:password"). Every error names the file; all
// errors are reported, one per line.
absl::Status CheckReferencedFiles(const ServerConfig& config);

// The secret files the config names (admin token, session key, fleet peer
// token, TLS private key, etcd client key and credentials) that anyone may
// read (mode o+r), one message per file naming it, its mode and the fix.
// Group-readable files pass: Kubernetes mounts secrets for the pod's
// fsGroup (0440). The server binary refuses to start on any, and
// --check-config fails on them, unless --allow-readable-secrets (then they
// are warnings, and AsideServer::Create logs each: config.secret_readable).
std::vector<std::string> SecretFilesReadableByOthers(
    const ServerConfig& config);

}  // namespace aside::server

#endif  // ASIDE_SERVER_CONFIG_CHECK_H_
