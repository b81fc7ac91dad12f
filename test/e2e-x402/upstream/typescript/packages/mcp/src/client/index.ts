export * from "./x402MCPClient";
