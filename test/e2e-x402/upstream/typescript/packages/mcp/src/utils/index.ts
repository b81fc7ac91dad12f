export * from "./encoding";
