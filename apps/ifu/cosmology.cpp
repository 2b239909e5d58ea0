// (placeholder)
namespace tessera::ifu {}
