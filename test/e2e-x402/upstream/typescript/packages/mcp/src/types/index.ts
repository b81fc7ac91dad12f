export * from "./mcp";
