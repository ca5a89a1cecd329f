#include "server/config_check.h"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/auth/admin_auth.h"
#include "server/base/read_file.h"
#include "server/load/load_view_peers.h"
#include "server/store/session_key.h"

namespace aside::server {
namespace {

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::unique_ptr<BIO, BioFree> MemoryBio(const std::string& pem) {
  return std::unique_ptr<BIO, BioFree>(
      BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The first certificate of a PEM bundle, or null.
std::unique_ptr<X509, X509Free> FirstCertificate(const std::string& pem) {
  auto bio = MemoryBio(pem);
  return std::unique_ptr<X509, X509Free>(
      bio ? PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr) : nullptr);
}

// A certificate and its private key (each optional), as PEM files that
// load and match; `what` names their use ("TLS", "etcd client").
void CheckKeyPair(const std::string& cert_file, const std::string& key_file,
                  absl::string_view what, std::vector<std::string>* errors) {
  std::unique_ptr<X509, X509Free> cert;
  if (!cert_file.empty()) {
    absl::StatusOr<std::string> pem =
        ReadWholeFile(cert_file, absl::StrCat(what, " certificate"));
    if (!pem.ok()) {
      errors->emplace_back(pem.status().message());
    } else if (cert = FirstCertificate(*pem); cert == nullptr) {
      errors->push_back(
          absl::StrCat(cert_file, ": no PEM certificate in the file"));
    }
  }
  if (!key_file.empty()) {
    absl::StatusOr<std::string> pem =
        ReadWholeFile(key_file, absl::StrCat(what, " private key"));
    if (!pem.ok()) {
      errors->emplace_back(pem.status().message());
    } else {
      auto bio = MemoryBio(*pem);
      std::unique_ptr<EVP_PKEY, KeyFree> key(
          bio ? PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr)
              : nullptr);
      if (key == nullptr) {
        errors->push_back(
            absl::StrCat(key_file, ": no PEM private key in the file"));
      } else if (cert != nullptr &&
                 X509_check_private_key(cert.get(), key.get()) != 1) {
        errors->push_back(absl::StrCat(
            key_file, ": the private key does not match the certificate ",
            cert_file));
      }
    }
  }
}

// A CA bundle (optional): a PEM file with at least one certificate.
void CheckBundle(const std::string& file, absl::string_view what,
                 std::vector<std::string>* errors) {
  if (file.empty()) {
    return;
  }
  absl::StatusOr<std::string> pem = ReadWholeFile(file, what);
  if (!pem.ok()) {
    errors->emplace_back(pem.status().message());
  } else if (FirstCertificate(*pem) == nullptr) {
    errors->push_back(absl::StrCat(file, ": no PEM certificate in the file"));
  }
}

// The etcd store's files: CA bundle, client certificate and key, and the
// credentials file (one line "username:password").
void CheckEtcdFiles(const StoreConfig& store,
                    std::vector<std::string>* errors) {
  CheckBundle(store.ca_file, "etcd CA bundle", errors);
  CheckKeyPair(store.cert_file, store.key_file, "etcd client", errors);
  if (store.credentials_file.empty()) {
    return;
  }
  absl::StatusOr<std::string> text =
      ReadWholeFile(store.credentials_file, "etcd credentials file");
  if (!text.ok()) {
    errors->emplace_back(text.status().message());
    return;
  }
  absl::string_view line = absl::StripTrailingAsciiWhitespace(*text);
  const size_t colon = line.find(':');
  if (colon == absl::string_view::npos || colon == 0 ||
      line.find('\n') != absl::string_view::npos) {
    errors->push_back(absl::StrCat(
        store.credentials_file, ": expected one line \"username:password\""));
  }
}

}  // namespace

absl::Status CheckReferencedFiles(const ServerConfig& config) {
  std::vector<std::string> errors;
  auto note = [&errors](const absl::Status& s) {
    if (!s.ok()) {
      errors.emplace_back(s.message());
    }
  };

  if (!config.session_key_file.empty()) {
    note(ReadSessionKeyFile(config.session_key_file).status());
  }

  note(AdminAuth::Create(config.admin_token_file, config.admin_identities)
           .status());

  if (!config.fleet_load.peer_token_file.empty()) {
    note(ReadPeerToken(config.fleet_load.peer_token_file).status());
  }

  CheckKeyPair(config.tls_cert_file, config.tls_key_file, "TLS", &errors);
  CheckBundle(config.tls_client_ca_file, "TLS client CA bundle", &errors);
  if (config.store.type == "etcd") {
    CheckEtcdFiles(config.store, &errors);
  }
  if (errors.empty()) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrJoin(errors, "\n"));
}

std::vector<std::string> SecretFilesReadableByOthers(
    const ServerConfig& config) {
  const std::pair<const std::string*, const char*> files[] = {
      {&config.admin_token_file, "admin token file"},
      {&config.session_key_file, "session key file"},
      {&config.fleet_load.peer_token_file, "fleet peer token file"},
      {&config.tls_key_file, "TLS private key"},
      {&config.store.key_file, "etcd client private key"},
      {&config.store.credentials_file, "etcd credentials file"},
  };
  std::vector<std::string> out;
  for (const auto& [path, what] : files) {
    struct stat st {};
    if (path->empty() || stat(path->c_str(), &st) != 0 ||
        (st.st_mode & S_IROTH) == 0) {
      continue;
    }
    out.push_back(absl::StrFormat(
        "%s: %s is readable by every user (mode %04o); chmod o-r it (600, "
        "or 640/440 for the server's group)",
        *path, what, st.st_mode & 07777));
  }
  return out;
}

}  // namespace aside::server
