// Exact scheme exports
export * from "./exact";

// Types
export * from "./types";

// Constants
export * from "./constants";

// Signer utilities
export * from "./signer";

// Utils
export * from "./utils";
