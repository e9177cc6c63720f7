"""Which arm runs a command: what each arm offers here (offerings), the choice between them,
building the arm (arm_factory), and doctor's report of it all."""
