"""What chat clients send: their transcripts (checked, reconciled, applied), their chats as durable submissions, and the chat() callbacks."""
