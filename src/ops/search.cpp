// (placeholder)
namespace tessera {}
