"""What a grading run leaves behind: the gradebook, grades.csv, each student's JSON and feedback, the class summary.
"""
