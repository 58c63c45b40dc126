#pragma once
// CURVE on the control socket: the server's key pair, the client public keys allowed in (checked
// by a ZAP handler, so that an unlisted client never completes its handshake), and the keys that
// may use the destructive commands. Key files are text: "public: Z85" and "secret: Z85" lines
// (40 Z85 characters each), as `glint ctl keygen` writes them; a list of allowed keys is a file
// (or a directory of files) of such "public:" lines or bare Z85 keys, '#' starting a comment.
#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include "glint/config/config.hpp"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace glint::daemon {

struct CurveKeyPair {
  std::string public_key;  ///< Z85, 40 characters
  std::string secret_key;  ///< Z85, 40 characters; empty when only the public key is known
};

/// Whether this libzmq was built with CURVE (libsodium).
bool curve_available();
/// A fresh key pair (zmq_curve_keypair); throws std::runtime_error without CURVE.
CurveKeyPair generate_key_pair();
/// Writes `file` (mode 0600: both keys) and `file`.pub (the public key only); refuses to
/// replace an existing file. Throws std::runtime_error naming the file.
void write_key_pair(const std::filesystem::path& file, const CurveKeyPair& keys);
/// Reads a key pair file; with `need_secret`, a missing secret key is an error. Throws
/// std::runtime_error naming the file and the line.
CurveKeyPair read_key_pair(const std::filesystem::path& file, bool need_secret);
/// The public keys (Z85) in a file, or in every regular file of a directory. Throws
/// std::runtime_error naming the file and the line that is not a key.
std::set<std::string> read_public_keys(const std::filesystem::path& file_or_directory);
/// `text` if it is a Z85 key, else the public key read from the file `text` names.
std::string public_key_from(const std::string& text);

/// The control socket's CURVE settings of one configuration. Without CURVE (a loopback endpoint
/// and require_curve off) it does nothing and allows everything.
class ControlSecurity {
 public:
  /// Loads the key files; throws std::runtime_error naming the config key and the file when one
  /// cannot be used, or when CURVE is needed and libzmq lacks it.
  explicit ControlSecurity(const config::ControlConfig& c);
  ~ControlSecurity();  ///< stops the ZAP handler
  ControlSecurity(const ControlSecurity&) = delete;
  ControlSecurity& operator=(const ControlSecurity&) = delete;

  bool enabled() const { return enabled_; }
  /// Starts the ZAP handler on `ctx` and makes `server` a CURVE server; call before binding.
  void apply(zmq::context_t& ctx, zmq::socket_t& server);
  /// Whether the client with this public key (Z85, the message's User-Id) may run `command`.
  bool allows(const std::string& client_key, const std::string& command) const;
  std::size_t n_clients() const { return clients_.size(); }

 private:
  bool enabled_ = false;
  CurveKeyPair server_;
  std::set<std::string> clients_, admins_;
  bool admins_listed_ = false;
  struct Zap;
  std::unique_ptr<Zap> zap_;
};

}  // namespace glint::daemon
