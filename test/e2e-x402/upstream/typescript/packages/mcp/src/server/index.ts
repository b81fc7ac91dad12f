export * from "./paymentWrapper";
